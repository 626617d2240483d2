"""Refresh the docs' screenshots: `make screenshots` (or `.venv/bin/python docs/screenshots.py`);
`make approve-screenshots` runs it after approving.

The pictures come from the visual check's approved images (tests/e2e/approved/, drawn by
tests/e2e/test_visual.py in Debian's Chromium at 1440 px on the demo fleet and approved with
`make approve-screenshots`), so the README shows exactly what the suite checks. Server pages are
cut to the first screenful; the compare page is kept whole. Look at each PNG before committing."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
APPROVED = ROOT / "tests" / "e2e" / "approved"
SCREEN = 1000  # px: the visual check's viewport height
SHOTS = [
    # docs file, approved picture, whole page
    ("server-page.png", "server-hgx-h200.png", False),
    ("compare-page.png", "compare.png", True),
    ("dgx1v-server.png", "server-dgx1v-gpu0.png", False),
    ("h20-36nic-server.png", "server-hgx-h20.png", False),
    ("fabric-page.png", "fabric-ibnet-01.png", False),  # docs/fabric.md's picture
]


def cut(source: str, whole: bool) -> Image.Image:
    """The docs picture made from an approved one (tests/core/test_docs_screenshots.py holds
    each docs picture to it)."""
    picture = Image.open(APPROVED / source)
    if not whole:
        picture = picture.crop((0, 0, picture.width, min(picture.height, SCREEN)))
    return picture


def main() -> None:
    for name, source, whole in SHOTS:
        cut(source, whole).save(DOCS / name, optimize=True)
        print(f"docs/{name} <- tests/e2e/approved/{source}")


if __name__ == "__main__":
    main()
