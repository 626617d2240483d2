"""Browser tests: Debian's Chromium driven by Playwright against pytest-django's live server,
with the demo fleet loaded from the real fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
XSS_HOST = "<img src=x onerror=alert(1)>"
PASSWORD = "e2e-password"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def fleet(transactional_db: None) -> None:
    """The demo fleet from the real fixtures, plus a server whose hostname is markup."""
    call_command("load_demo")
    call_command(
        "import_topo",
        str(FIXTURES / "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"),
        "--host",
        XSS_HOST,
    )


@pytest.fixture
def user(transactional_db: None):  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("operator", password=PASSWORD)


@pytest.fixture
def page(browser, live_server, user, request):  # type: ignore[no-untyped-def]
    """A signed-in page; a failing page script fails the test; each test leaves a screenshot."""
    context = browser.new_context(
        viewport={"width": 1400, "height": 1000}, base_url=live_server.url
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda dialog: errors.append(f"dialog opened: {dialog.message}"))
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    page.errors = errors  # type: ignore[attr-defined]
    yield page
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()
    assert not errors, errors


def wait_for_flag(page: Page, flag: str = "graph-ready", timeout: int = 20_000) -> None:
    """Wait for a page module to mark <body data-FLAG>. A selector, not wait_for_function:
    the pages' CSP forbids the eval that a polled JavaScript predicate needs."""
    page.wait_for_selector(f"body[data-{flag}]", state="attached", timeout=timeout)


def wait_for_graph(page: Page) -> None:
    wait_for_flag(page, "graph-ready")
