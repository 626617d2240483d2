"""What the project promises about its own shape: the README serves on another port as it says
(issue 27 item 9), stays a manual under 450 lines, its CLI examples run verbatim (issue 26; its
API examples: tests/web/test_readme_examples.py), and no module in topoweb/ grows past 800
lines (issue 23)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests import readme_examples

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


CLI_EXAMPLES = [
    c for c in readme_examples.commands() if c.startswith(".venv/bin/python -m topoweb.core.cli ")
]


def test_the_readme_shows_the_serve_and_place_commands() -> None:
    verbs = {c.split()[3] for c in CLI_EXAMPLES}
    assert {"place", "serve", "cost"} <= verbs


@pytest.mark.parametrize("command", [c for c in CLI_EXAMPLES if "$FILE" in c])
def test_each_readme_cli_example_on_file_runs_verbatim_and_prints_json(command: str) -> None:
    # As the README runs it: from the checkout, in a shell that set FILE as the README does.
    script = f"FILE={shlex.quote(readme_examples.readme_file())}\n{command}"
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    if command.split()[3] == "serve":
        best = doc["recommended"]
        assert {"tp", "pp", "replicas", "gpus", "memory_per_gpu"} <= set(best)
        assert "assumed" in doc and doc["notes"] == []  # within the model's context window
