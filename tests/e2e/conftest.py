"""Browser tests: Debian's Chromium driven by Playwright against pytest-django's live server,
on a few servers ingested from the real fixtures and analysed in-process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Page, sync_playwright

from bench.live import CHROMIUM, CHROMIUM_FLAGS

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
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def held_tasks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[object, ...]]]:
    """The tasks the pages' requests ask for, held here instead of sent (the live server runs
    in this process): each test runs what the workers would (`analyse_pending`) when it has
    looked at the pending state. Sent, they could be taken by the session worker that
    tests/web starts, which would finish them before a page could show what it waits for."""
    from tests.web.conftest import keep_tasks_here

    return keep_tasks_here(monkeypatch)


H200 = "e2e-h200-01"  # topo_01: 8x H200, NV18 all-to-all, 12 NICs, two NUMA nodes
A100 = "e2e-a100-01"  # topo_26: DGX A100, NV12 all-to-all, 12 mlx5 NICs, nccl_06 attached
DGX1 = "e2e-dgx1-01"  # topo_12: V100 hybrid cube mesh (NV1/NV2), for placement that matters
H200_TOPO = "topo_01_h200-8gpu-12nic-numaid.txt"
A100_TOPO = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
A100_NCCL = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"
DGX1_TOPO = "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"


def ingest(hostname: str, topo: str, gpu_model: str = "", benchmarks: tuple[str, ...] = ()) -> None:
    """One server through the same service the collector's reports go through, then assessed
    as the health worker would (no worker in e2e)."""
    from django.utils import timezone

    from topoweb.fleet.models import Source
    from topoweb.fleet.services import BenchmarkInput, ingest_report
    from topoweb.health.services import evaluate_server

    result = ingest_report(
        hostname=hostname,
        topo_text=(FIXTURES / topo).read_text(encoding="utf-8"),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
        gpu_model_hint=gpu_model,
        benchmarks=[
            BenchmarkInput("nccl-tests", (FIXTURES / b).read_text(encoding="utf-8"))
            for b in benchmarks
        ],
    )
    evaluate_server(result.server.pk)


def analyse_pending() -> None:
    """Run the analyses the ingests asked for here, then assess every server (its page reads
    the assessment), instead of waiting for the workers."""
    from topoweb.analysis import services
    from topoweb.analysis.models import Analysis
    from topoweb.fleet.models import Server
    from topoweb.health.services import evaluate_server

    for pk in Analysis.objects.filter(status=Analysis.Status.PENDING).values_list("pk", flat=True):
        assert services.run_analysis(pk) == "done", pk
    for pk in Server.objects.values_list("pk", flat=True):
        evaluate_server(pk)


@pytest.fixture
def fleet(transactional_db: None) -> None:
    """An H200, a DGX A100 with its nccl-tests sweep, and a server whose hostname is markup,
    each analysed: seconds, where the whole demo fleet took most of a minute per test."""
    ingest(H200, H200_TOPO, "NVIDIA H200")
    ingest(A100, A100_TOPO, "NVIDIA A100-SXM4-40GB", (A100_NCCL,))
    ingest(XSS_HOST, A100_TOPO)
    analyse_pending()


@pytest.fixture
def demo_fleet(transactional_db: None) -> None:
    """The whole demo fleet (79 servers), for a test that needs SKUs with several servers."""
    call_command("load_demo")
    analyse_pending()


@pytest.fixture
def user(transactional_db: None):  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    operator = get_user_model().objects.create_user("operator", password=PASSWORD)
    operator.user_permissions.add(Permission.objects.get(codename="upload_files"))  # uploads
    return operator


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
    # The click left the pointer where the sign-in button was: over a server page's graph (the
    # H20's CPU box), where a hover shows up in a picture whenever the browser gets round to
    # it. Tests start with the pointer off the page's content.
    page.mouse.move(0, 0)
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


def click_node(page: Page, node_id: str) -> None:
    """Click a graph node where Cytoscape drew it."""
    box = page.evaluate(
        """(id) => {
          const cy = window.topowebCy;
          const p = cy.getElementById(id).renderedPosition();
          const r = cy.container().getBoundingClientRect();
          return {x: r.left + p.x, y: r.top + p.y};
        }""",
        node_id,
    )
    page.mouse.click(box["x"], box["y"])
