"""`cli parse FILE | head` (issue 27 item 9): a reader that stops early ends the CLI quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "tests" / "fixtures" / "topo_38_h20-8gpu-36nic-MANGLED-tab-expansion-merged-cells.txt"


def test_parse_piped_into_a_reader_that_stops_early_prints_no_traceback() -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "topoweb.core.cli", "parse", str(TOPO)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert cli.stdout is not None and cli.stderr is not None
    assert cli.stdout.readline().strip() == b"{"
    cli.stdout.close()  # as `head -1` does after its line
    err = cli.stderr.read().decode()
    cli.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
