"""The visual check: a fixed set of pages on the demo fleet, screenshotted in Debian's Chromium
at 1440 px and compared with the approved pictures in tests/e2e/approved/ (a small per-pixel
tolerance; a diff image lands in test-artifacts/visual/ on failure).

`make approve-screenshots` (TOPOWEB_APPROVE_SCREENSHOTS=1) rewrites the approved pictures
instead of comparing: look at every changed PNG before committing it. Times and ages are hidden
(their text changes with the clock); everything else the page draws is compared."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
from PIL import Image, ImageChops
from playwright.sync_api import Browser, Page

from tests.e2e.conftest import ARTIFACTS, PASSWORD

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

APPROVED = Path(__file__).resolve().parent / "approved"
APPROVE = os.environ.get("TOPOWEB_APPROVE_SCREENSHOTS") == "1"
WIDTH, HEIGHT = 1440, 1000
# A pixel counts as changed past this difference on any channel (anti-aliasing jitter stays
# under it); a page fails past this many changed pixels.
CHANNEL_TOLERANCE = 24
CHANGED_PIXELS = 150
# Text that changes with the clock keeps its place but is not drawn.
FROZEN = """
.age, .timing { visibility: hidden !important; }
input, textarea { caret-color: transparent !important; }
"""


@dataclass(frozen=True)
class Shot:
    name: str
    path: str
    flag: str  # the body data flag the page sets once drawn
    action: str = ""  # what to do before the picture, see take()


SHOTS = [
    Shot("fleet", "/", "fleet-ready"),
    Shot("server-hgx-h200", "/servers/hgx-h200-a01/", "graph-ready"),
    Shot("server-hgx-h200-gpu0", "/servers/hgx-h200-a01/?gpu=GPU0", "graph-ready"),
    Shot("server-dgx1v-gpu0", "/servers/dgx1v-a01/?gpu=GPU0", "graph-ready"),
    Shot("server-hgx-h20", "/servers/hgx-h20-a01/", "graph-ready"),
    Shot("server-hgx-h20-all-nics", "/servers/hgx-h20-a01/?nics=all", "graph-ready"),
    Shot("server-gtx-rig", "/servers/gtx-rig-a01/", "graph-ready"),
    Shot(
        "compare",
        "/compare/?" + urlencode({"a": "DGX A100", "b": "HGX H200 8-GPU"}),
        "compare-ready",
    ),
    Shot("upload-preview", "/upload/", "preview-ready", action="preview"),
    Shot("acceptance-autodl-2080ti", "/servers/autodl-2080ti-a01/acceptance/", ""),
    Shot("acceptance-gtx-rig", "/servers/gtx-rig-a01/acceptance/", ""),
    Shot("fabrics", "/fabrics/", ""),
    Shot("fabric-ibnet-01", "/fabrics/dgx-ndr/", "fabric-ready"),
]
# The largest demo server (most devices drawn) joins the set by what the fleet holds.


def largest_server() -> str:
    from topoweb.fleet.models import Server

    biggest = max(
        Server.objects.exclude(latest_snapshot=None).select_related("latest_snapshot"),
        key=lambda s: (
            (s.latest_snapshot.gpu_count or 0) + (s.latest_snapshot.nic_count or 0),  # type: ignore[union-attr]
            s.hostname,
        ),
    )
    return biggest.hostname


def evaluate_fleet() -> None:
    """Run the health checks and acceptance of every server here, as the worker would; store
    and analyse the real fabric ibnet_01 for the fabric pages."""
    from tests.e2e.conftest import FIXTURES
    from topoweb.fleet import fabric_services
    from topoweb.fleet.models import Server, Source
    from topoweb.health.services import evaluate_server

    for pk in Server.objects.order_by("pk").values_list("pk", flat=True):
        evaluate_server(pk)
    text = (FIXTURES / "ibnet_01_dgx-h100-ndr-fabric-40-switches-582-hcas.txt").read_text()
    done = fabric_services.ingest_fabric(name="dgx-ndr", text=text, source=Source.UPLOAD)
    fabric_services.analyse_capture(done.capture.pk)


def take(browser: Browser, base: str, shot: Shot) -> bytes:
    context = browser.new_context(
        viewport={"width": WIDTH, "height": HEIGHT}, base_url=base, device_scale_factor=1
    )
    page = context.new_page()
    try:
        sign_in(page, base)
        page.goto(shot.path)
        if shot.action == "preview":  # a capture the reader repaired: its warnings listed
            from tests.core.topo_fixtures import glued_h200

            page.fill("#upload-hostname", "hgx-h200-a01")
            page.fill("#upload-text", glued_h200())
            page.click("#preview-button")
        if shot.flag:
            page.wait_for_selector(f"body[data-{shot.flag}]", state="attached", timeout=60_000)
        page.wait_for_load_state("networkidle")
        page.mouse.move(0, 0)
        return page.screenshot(full_page=True, animations="disabled", style=FROZEN)
    finally:
        context.close()


def sign_in(page: Page, base: str) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def compare(name: str, taken: bytes) -> str | None:
    """None when the picture matches its approved one; else what differs (and the diff image
    and the new picture are written to test-artifacts/visual/)."""
    approved_path = APPROVED / f"{name}.png"
    if not approved_path.exists():
        return f"{name}: no approved picture (run `make approve-screenshots` and look at it)"
    new = Image.open(io.BytesIO(taken)).convert("RGB")
    old = Image.open(approved_path).convert("RGB")
    out = ARTIFACTS / "visual"
    if new.size != old.size:
        out.mkdir(parents=True, exist_ok=True)
        new.save(out / f"{name}.png")
        return f"{name}: size {new.size} where the approved picture is {old.size}"
    diff = ImageChops.difference(new, old)
    mask = diff.convert("L").point(lambda v: 255 if v > CHANNEL_TOLERANCE else 0)
    changed = sum(1 for v in mask.getdata() if v)
    if changed <= CHANGED_PIXELS:
        return None
    out.mkdir(parents=True, exist_ok=True)
    new.save(out / f"{name}.png")
    marked = Image.blend(old, Image.new("RGB", old.size, "white"), 0.7)
    marked.paste(Image.new("RGB", old.size, (230, 0, 0)), mask=mask)
    marked.save(out / f"{name}-diff.png")
    return f"{name}: {changed} pixels changed (see test-artifacts/visual/{name}-diff.png)"


def test_the_pages_look_as_approved(
    browser: Browser,
    live_server,  # type: ignore[no-untyped-def]
    demo_fleet: None,
    user,  # type: ignore[no-untyped-def]
) -> None:
    evaluate_fleet()
    shots = [
        *SHOTS,
        Shot("server-largest", f"/servers/{largest_server()}/", "graph-ready"),
    ]
    problems = []
    for shot in shots:
        taken = take(browser, live_server.url, shot)
        problem = compare(shot.name, taken)
        if APPROVE:
            # Only pictures that changed past the tolerance are rewritten: the others' bytes
            # would differ with every run while their pixels do not.
            if problem:
                APPROVED.mkdir(exist_ok=True)
                (APPROVED / f"{shot.name}.png").write_bytes(taken)
            continue
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)
