"""The one error every reader raises (re-exported as topoweb.core.formats.ParseError), and how
a reader's warnings name the lines they are about: their own module so that the readers and
the package that dispatches to them import them one way."""

from __future__ import annotations


class ParseError(ValueError):
    """Input that a reader cannot turn into a model object. `line` is 1-based where known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


def lines_named(first: int, last: int) -> str:
    """`line 5`, or `lines 5-6` for a span: how a warning about several lines names them."""
    return f"line {first}" if first == last else f"lines {first}-{last}"
