"""Serve exactly the library files the pages load from frontend/node_modules, under vendor/.

npm installs whole packages (sources, demos, tests); only their built UMD/CSS files are
static assets, so collectstatic copies those and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import CheckMessage, Warning
from django.core.files.storage import FileSystemStorage

# static path -> file under frontend/node_modules
VENDOR_FILES: dict[str, str] = {
    "vendor/cytoscape.min.js": "cytoscape/dist/cytoscape.min.js",
    "vendor/uPlot.iife.min.js": "uplot/dist/uPlot.iife.min.js",
    "vendor/uPlot.min.css": "uplot/dist/uPlot.min.css",
}


def node_modules() -> Path:
    return Path(settings.BASE_DIR) / "frontend" / "node_modules"


class VendorFinder(BaseFinder):
    def check(self, **kwargs: Any) -> list[CheckMessage]:
        missing = [src for src in VENDOR_FILES.values() if not (node_modules() / src).is_file()]
        if not missing:
            return []
        return [
            Warning(
                f"frontend libraries are not installed ({missing[0]} missing); "
                "run `npm ci --prefix frontend`",
                id="ui.W001",
            )
        ]

    # One body for both of BaseFinder.find's overloads (find_all, or `all` from older callers).
    def find(  # type: ignore[override]
        self, path: str, find_all: bool = False, **kwargs: Any
    ) -> str | list[str]:
        src = VENDOR_FILES.get(path)
        found = str(node_modules() / src) if src and (node_modules() / src).is_file() else None
        if find_all or kwargs.get("all"):
            return [found] if found else []
        return found or []

    def list(self, ignore_patterns: Any) -> Any:
        storage = _VendorStorage(location=str(node_modules()))
        for target, src in VENDOR_FILES.items():
            if (node_modules() / src).is_file():
                yield target, storage


class _VendorStorage(FileSystemStorage):
    """Reads node_modules, naming each file by its vendor/ path (what collectstatic copies)."""

    def path(self, name: str) -> str:
        return super().path(VENDOR_FILES.get(name, name))
