"""JSON for orchestra's own records: compact, with binary content (``bytes``) as base64."""

from __future__ import annotations

import base64
import json
from typing import Any

__all__ = ["dumps"]


def dumps(value: Any, *, lenient: bool = False) -> str:
    """Compact JSON; ``bytes`` become base64 strings. Other non-JSON values raise ``TypeError``, or with
    ``lenient`` become their ``str()`` (for records meant to be read, not loaded back)."""

    def default(obj: Any) -> Any:
        if isinstance(obj, bytes | bytearray):
            return base64.b64encode(obj).decode()
        if lenient:
            return str(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON serializable")

    return json.dumps(value, separators=(",", ":"), default=default, ensure_ascii=False)
