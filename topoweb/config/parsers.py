"""The API's JSON parser. Its own module because DRF reads DEFAULT_PARSER_CLASSES while
importing rest_framework.views, which config/api.py imports."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, parsers


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, except that a body nested past Python's recursion limit is a 400:
    the json module raises RecursionError there, which DRF does not catch."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
