"""The API's JSON renderer: orjson instead of the json module, through DRF's renderer interface.

Stored JSON is served as the bytes it is stored as: wrap the text in `raw_json` (orjson's
Fragment) and it is written verbatim, neither decoded nor encoded again. Types orjson does not
know (Decimal, lazy strings) go to DRF's own encoder; a value orjson refuses (an integer past
64 bits) goes through the json module with DRF's encoder."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson
from rest_framework.renderers import BaseRenderer
from rest_framework.utils.encoders import JSONEncoder

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
_drf_encoder = JSONEncoder()


def raw_json(text: str | None) -> Any:
    """Stored JSON text, served as it is (None stays None)."""
    return None if text is None else orjson.Fragment(text)


def dumps(data: Any) -> bytes:
    """Compact JSON as the API writes it."""
    try:
        return orjson.dumps(data, default=_drf_encoder.default, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return json.dumps(data, cls=_FragmentEncoder, separators=(",", ":")).encode()


class _FragmentEncoder(JSONEncoder):
    def default(self, obj: Any) -> Any:
        if isinstance(obj, orjson.Fragment):
            return json.loads(orjson.dumps(obj))
        return super().default(obj)


class JSONRenderer(BaseRenderer):
    media_type = "application/json"
    format = "json"
    charset = None

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b""
        # As DRF writes them: U+2028/U+2029 escaped, so the JSON is also valid JavaScript.
        return dumps(data).replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
