"""Refresh the README's screenshots: `make screenshots` (or `.venv/bin/python docs/screenshots.py`).

Loads the demo fleet into a throwaway SQLite database, serves it with `runserver` and takes
each picture in Debian's Chromium at 1280 px: the server page of an HGX H200, the compare page
(DGX A100 against HGX H200), a DGX-1V (its hybrid cube mesh) and the 36-NIC HGX H20. The
graph is laid out on the server, so the same fleet gives the same pictures. Look at each PNG
before committing it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.live import CHROMIUM, CHROMIUM_FLAGS, runserver, sqlite_env  # noqa: E402

DOCS = ROOT / "docs"
PORT = int(os.environ.get("SCREENSHOT_PORT", "8792"))
SHOTS = [
    # file, path, flag the page sets when drawn, full page
    ("server-page.png", "/servers/hgx-h200-a01/", "graph-ready", False),
    (
        "compare-page.png",
        "/compare/?" + urllib.parse.urlencode({"a": "DGX A100", "b": "HGX H200 8-GPU"}),
        "compare-ready",
        True,
    ),
    ("dgx1v-server.png", "/servers/dgx1v-a01/?gpu=GPU0", "graph-ready", False),
    ("h20-36nic-server.png", "/servers/hgx-h20-a01/", "graph-ready", False),
]


def main() -> None:
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="topoweb-screenshots-"))
    env = sqlite_env(work / "demo.sqlite3")
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True)
    subprocess.run([*manage, "load_demo"], env=env, check=True, stdout=subprocess.DEVNULL)
    with runserver(PORT, env) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        for name, path, flag, full in SHOTS:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(base + path)
            page.wait_for_selector(f"body[data-{flag}]", state="attached", timeout=120_000)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(DOCS / name), full_page=full)
            page.close()
            print(f"docs/{name}")
        browser.close()


if __name__ == "__main__":
    main()
