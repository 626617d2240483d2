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


def test_no_module_imports_topoweb_inside_a_function_but_app_registration() -> None:
    """Function-local imports are how cycles hide from import-linter's layers; the one place
    Django wants them is AppConfig.ready(), where apps register their tasks and hooks."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    hidden = []
    for path in sorted((root / "topoweb").rglob("*.py")):
        if path.name == "apps.py" or "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("topoweb"):
                    hidden.append(f"{path.relative_to(root)}:{node.lineno} {node.module}")
                if isinstance(node, ast.Import) and any(
                    a.name.startswith("topoweb") for a in node.names
                ):
                    hidden.append(f"{path.relative_to(root)}:{node.lineno}")
    assert hidden == []
