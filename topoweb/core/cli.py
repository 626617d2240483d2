"""Command line over the core: `python -m topoweb.core.cli parse FILE` and friends.

Contract: a JSON document on stdout and exit 0, or one line naming the problem on stderr and
exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from topoweb.core.formats import ParseError, parse_text

EXIT_BAD_INPUT = 2


class UsageError(Exception):
    """A request the core cannot answer (bad file, impossible job); printed as one line."""


def read_input(path: str) -> str:
    try:
        data = Path(path).read_bytes() if path != "-" else sys.stdin.buffer.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(f"{path}: line {line}: not UTF-8 text") from exc


def cmd_parse(args: argparse.Namespace) -> dict[str, Any]:
    text = read_input(args.file)
    try:
        return parse_text(text).to_document()
    except ParseError as exc:
        raise UsageError(f"{args.file}: {exc}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m topoweb.core.cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parse", help="parse topo -m, nccl-tests or p2p output into JSON")
    p.add_argument("file", help="path to the output file, or - for standard input")
    p.set_defaults(handler=cmd_parse)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], dict[str, Any]] = args.handler
    try:
        result = handler(args)
    except UsageError as exc:
        print(str(exc).replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_INPUT
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
