"""The docs' screenshots are the visual check's approved pictures (issue 27: "the screenshots
in docs/ refreshed from that suite"): each one, pixel for pixel, as docs/screenshots.py cuts it
from tests/e2e/approved/. `make approve-screenshots` refreshes both."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from PIL import Image, ImageChops

DOCS = Path(__file__).resolve().parents[2] / "docs"


def screenshots() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_screenshots", DOCS / "screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_picture_in_docs_is_cut_from_an_approved_one() -> None:
    made = screenshots()
    named = {name for name, _, _ in made.SHOTS}
    shown = {p.name for p in DOCS.glob("*.png")}
    assert shown == named, "a picture in docs/ that the visual check does not draw"


def test_each_docs_picture_is_its_approved_picture_as_cut() -> None:
    made = screenshots()
    stale = []
    for name, source, whole in made.SHOTS:
        want = made.cut(source, whole).convert("RGB")
        have = Image.open(DOCS / name).convert("RGB")
        if have.size != want.size or ImageChops.difference(have, want).getbbox() is not None:
            stale.append(name)
    assert not stale, f"{stale}: run `make screenshots` (and look at them)"
