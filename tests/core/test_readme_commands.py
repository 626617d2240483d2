"""The README says how to serve on another port (issue 27 item 9), and the Makefile does it."""

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
