"""What the project promises about its own shape: the README serves on another port as it says
(issue 27 item 9), stays a manual under 450 lines, and no module in topoweb/ grows past 800
lines (issue 23)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_names_make_run_port_and_the_makefile_serves_on_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    said = re.search(r"make run PORT=(\d+)", readme)
    assert said is not None
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^PORT \?= ", makefile, re.M)
    run = makefile.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "runserver $(HOST):$(PORT)" in run


def test_the_readme_is_a_manual_under_450_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 450, f"README.md has {len(lines)} lines; figures go to docs/performance.md"


def test_no_module_in_topoweb_passes_800_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in (ROOT / "topoweb").rglob("*.py")
        if "migrations" not in path.parts
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > 800
    }
    assert long == {}, f"split these by concern: {long}"
