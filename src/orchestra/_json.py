"""JSON for orchestra's own records: compact, with binary content (``bytes``) as base64."""

from __future__ import annotations

import base64
import json
from typing import Any

__all__ = ["BYTES_MARKER", "decode_bytes", "dumps", "encode_bytes"]

BYTES_MARKER = "__bytes_encoded__"
"""Strands Agents' JSON form of ``bytes``: ``{"__bytes_encoded__": true, "data": "<base64>"}``."""


def _strict(obj: Any) -> Any:
    if isinstance(obj, bytes | bytearray):
        return base64.b64encode(obj).decode()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _lenient(obj: Any) -> Any:
    if isinstance(obj, bytes | bytearray):
        return base64.b64encode(obj).decode()
    return str(obj)


# Made once: json.dumps() with options builds a new encoder per call, which costs more than encoding the
# small values a journal save encodes by the hundred.
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=_strict, ensure_ascii=False).encode
_ENCODE_LENIENT = json.JSONEncoder(separators=(",", ":"), default=_lenient, ensure_ascii=False).encode


def dumps(value: Any, *, lenient: bool = False) -> str:
    """Compact JSON; ``bytes`` become base64 strings. Other non-JSON values raise ``TypeError``, or with
    ``lenient`` become their ``str()`` (for records meant to be read, not loaded back)."""
    return _ENCODE_LENIENT(value) if lenient else _ENCODE(value)


def encode_bytes(value: Any) -> Any:
    """A copy of ``value`` with every ``bytes`` replaced by a ``BYTES_MARKER`` object (JSON-safe, lossless)."""
    if isinstance(value, bytes | bytearray):
        return {BYTES_MARKER: True, "data": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: encode_bytes(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode_bytes(v) for v in value]
    return value


def decode_bytes(value: Any) -> Any:
    """The inverse of :func:`encode_bytes`: marker objects become ``bytes`` again."""
    if isinstance(value, dict):
        if value.get(BYTES_MARKER) is True and isinstance(value.get("data"), str):
            return base64.b64decode(value["data"])
        return {k: decode_bytes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_bytes(v) for v in value]
    return value
