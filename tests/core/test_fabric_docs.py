"""The fabric's exports and findings shown in README.md and docs/fabric.md are what the CLI
prints for ibnet_01 today: each `$ COMMAND` of a transcript is run as written (from the
repository root, in bash, after the block's `$ NAME=value` lines), and every line shown under it
must be a line of its output, in the order printed; a line `...` (or `... why`) stands for lines
left out. The findings digest in docs/fabric.md is checked against `cli fabric`'s JSON."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.core.test_fabric import IBNET_01, fabric_doc

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/fabric.md")


def fenced_blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def transcripts(doc: str) -> list[tuple[list[str], str, list[str]]]:
    """(assignments before it, command, the lines shown under it) per `$ ` command."""
    found: list[tuple[list[str], str, list[str]]] = []
    for block in fenced_blocks((ROOT / doc).read_text(encoding="utf-8")):
        setup: list[str] = []
        for line in block:
            if line.startswith("$ "):
                command = line[2:]
                if re.fullmatch(r"(\w+=(\"[^\"]*\"|\S+)\s*)+", command):
                    setup.append(command)
                else:
                    found.append((list(setup), command, []))
            elif found and found[-1][0] == setup and line.strip():
                found[-1][2].append(line)
    return found


def shown_in_order(shown: list[str], printed: list[str]) -> list[str]:
    """The shown lines (elisions skipped) that are not printed lines in that order."""
    lines = iter(printed)
    return [
        line
        for line in shown
        if not (line.strip() == "..." or line.strip().startswith("... "))
        and not any(line == out for out in lines)
    ]


def test_each_doc_shows_slurm_and_kubernetes_exports_of_ibnet_01() -> None:
    for doc in DOCS:
        commands = " ".join(command for _, command, _ in transcripts(doc))
        assert "--export topology.conf" in commands, doc
        assert "--export label.sh" in commands, doc
        assert all(shown for _, _, shown in transcripts(doc)), doc


@pytest.mark.parametrize(
    ("doc", "command", "setup", "shown"),
    [
        pytest.param(doc, command, setup, shown, id=f"{doc}: {command[-60:]}")
        for doc in DOCS
        for setup, command, shown in transcripts(doc)
    ],
)
def test_every_line_shown_is_what_the_command_prints(
    doc: str, command: str, setup: list[str], shown: list[str]
) -> None:
    assert "ibnet_01" in " ".join([*setup, command])
    ran = subprocess.run(
        ["bash", "-c", "; ".join([*setup, command])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert shown_in_order(shown, ran.stdout.splitlines()) == []


def test_the_findings_digest_is_the_clis_findings() -> None:
    """docs/fabric.md lists each kind with its count and the first findings of it."""
    findings = fabric_doc(IBNET_01.read_text())["findings"]
    counts = Counter(f["kind"] for f in findings)
    said = {(f["kind"], f["severity"], f["message"]) for f in findings}
    blocks = fenced_blocks((ROOT / "docs/fabric.md").read_text(encoding="utf-8"))
    (digest,) = [b for b in blocks if "missing_uplinks (" in b[0]]
    kind = ""
    seen: dict[str, int] = {}
    for line in digest:
        if heading := re.fullmatch(r"(\w+) \((\d+)\):", line):
            kind = heading.group(1)
            seen[kind] = int(heading.group(2))
        else:
            severity, _, message = line.strip().partition(": ")
            assert (kind, severity, message) in said, line
    assert seen == dict(counts)


def test_a_line_the_command_does_not_print_is_caught() -> None:
    printed = ["a", "b", "c"]
    assert shown_in_order(["a", "...", "c"], printed) == []
    assert shown_in_order(["c", "a"], printed) == ["a"]  # out of order
    assert shown_in_order(["a", "b (abridged)"], printed) == ["b (abridged)"]
    assert json.dumps(shown_in_order([], printed)) == "[]"
