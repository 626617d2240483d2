"""The core and the collector must load on a GPU host or in a CLI without Django."""

import json
import subprocess
import sys

import pytest

FORBIDDEN = ("django", "rest_framework", "celery", "kombu", "drf_spectacular")


@pytest.mark.parametrize(
    "module",
    [
        "topoweb.core",
        "topoweb.core.model",
        "topoweb.core.formats",
        "topoweb.core.cli",
        "topoweb.core.costs",
        "topoweb.core.placement",
        "topoweb.core.health",
        "collector",
        "collector.cli",
    ],
)
def test_importing_it_loads_no_web_framework(module: str) -> None:
    code = (
        f"import json, sys, importlib; importlib.import_module({module!r}); "
        "print(json.dumps(sorted(m for m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    loaded = json.loads(out)
    leaked = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert module in loaded
    assert leaked == []
