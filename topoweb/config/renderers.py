"""The API's JSON renderer: DRF's JSONRenderer, with orjson doing the encoding.

The same JSON values as DRF's (a float may be spelled differently: 0.00001 for 1e-05):
compact, UTF-8, dates and times as DRF's encoder writes them (handed back to it), lazy
strings and other types DRF knows through its encoder, U+2028/U+2029 escaped. Anything orjson
refuses (an integer past 64 bits, a requested indent) goes through DRF's own path; NaN and
infinities, which DRF refuses, become null. Stored JSON read as text (`RawJSON`) is written
verbatim.

ContentNegotiation is DRF's, answering without parsing in the usual case (no Accept header,
`*/*` or JSON, no format asked)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

import orjson
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.renderers import JSONRenderer as DrfJSONRenderer
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
_drf_encoder = JSONEncoder()


class RawJSON:
    """JSON text served as it is stored (a JSON column read as text): no decode, no encode."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    @classmethod
    def or_none(cls, text: str | None) -> RawJSON | None:
        return None if text is None else cls(text)


def _default(value: Any) -> Any:
    if isinstance(value, RawJSON):
        return orjson.Fragment(value.text)
    return _drf_encoder.default(value)


class _RawAwareEncoder(JSONEncoder):
    """DRF's encoder, reading stored JSON text back for the slow path."""

    def default(self, obj: Any) -> Any:
        if isinstance(obj, RawJSON):
            return json.loads(obj.text)
        return super().default(obj)


def dumps(data: Any) -> bytes:
    """Compact JSON as the API writes it."""
    return orjson.dumps(data, default=_default, option=_OPTIONS)


class JSONRenderer(DrfJSONRenderer):
    encoder_class = _RawAwareEncoder

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b""
        if self.get_indent(accepted_media_type or "", renderer_context or {}) is None:
            try:
                out = dumps(data)
            except orjson.JSONEncodeError:
                pass  # DRF's path raises the error its callers expect, or copes
            else:
                # As DRF does: U+2028/U+2029 escaped, so the JSON is also valid JavaScript.
                if b"\xe2\x80\xa8" in out or b"\xe2\x80\xa9" in out:
                    out = out.replace(b"\xe2\x80\xa8", b"\\u2028").replace(
                        b"\xe2\x80\xa9", b"\\u2029"
                    )
                return out
        return cast(bytes, super().render(data, accepted_media_type, renderer_context))


class ContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, which parses the Accept header into media types on every request:
    without a format asked for (suffix or query parameter) and with no Accept header, `*/*`
    (what clients send unless told otherwise) or exactly the first renderer's media type (a
    client asking for JSON), it picks the first renderer and its own media type, as DRF's loop
    does when that media type has no parameters. Anything else goes DRF's way."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        if (
            isinstance(renderers, list | tuple)
            and renderers
            and request.META.get("HTTP_ACCEPT", "*/*") in ("*/*", renderers[0].media_type)
            and not format_suffix
            and not request.query_params.get(self.settings.URL_FORMAT_OVERRIDE)
            and ";" not in renderers[0].media_type
        ):
            return renderers[0], renderers[0].media_type
        return cast(
            tuple[BaseRenderer, str], super().select_renderer(request, renderers, format_suffix)
        )
