"""The one error every reader raises (re-exported as topoweb.core.formats.ParseError): its own
module so that the readers and the package that dispatches to them import it one way."""

from __future__ import annotations


class ParseError(ValueError):
    """Input that a reader cannot turn into a model object. `line` is 1-based where known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)
