"""The README's shell examples as data: each command of its ```sh blocks (continuation lines
joined, comments dropped), the `FILE=` it names, and each `curl` split into method, path,
body; for the tests that run them verbatim (tests/core/test_readme_commands.py runs the CLI
lines, tests/web/test_readme_examples.py the API calls)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
API = "http://127.0.0.1:8000"


def commands() -> list[str]:
    """Every command of the README's sh blocks, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        for command in block.replace("\\\n", " ").splitlines():
            command = command.strip()
            if command and not command.startswith("#"):
                out.append(command)
    return out


def readme_file() -> str:
    """The capture the README's `FILE=` names (its examples' `$FILE`)."""
    (assignment,) = [c for c in commands() if c.startswith("FILE=")]
    return shlex.split(assignment.split("=", 1)[1])[0]


@dataclass(frozen=True)
class Curl:
    method: str
    path: str  # from /api/v1/, with its query
    body: Any  # the JSON sent, or None

    @property
    def hostnames(self) -> set[str]:
        """Servers the call names: in its path and in its body's `servers`."""
        names = set(re.findall(r"/servers/([^/?]+)/", self.path))
        if isinstance(self.body, dict):
            names |= {s["hostname"] for s in self.body.get("servers", [])}
        return names


def curls() -> list[Curl]:
    """The README's curl calls of the API, as sent (the token header `$H` aside)."""
    out = []
    for command in commands():
        if not command.startswith("curl "):
            continue
        words = shlex.split(command)[1:]
        method, body, url = "GET", None, None
        while words:
            word = words.pop(0)
            if word == "-X":
                method = words.pop(0)
            elif word == "-d":
                body = json.loads(words.pop(0))
            elif word == "-H":
                words.pop(0)
            elif word.startswith(API):
                url = word
        assert url is not None, command
        out.append(Curl(method, url.removeprefix(API), body))
    return out
