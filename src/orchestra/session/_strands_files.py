"""The repository layout's file format, byte for byte the one Strands Agents writes and reads.

A message file is ``{"message": {...}, "message_id": N, "redact_message": null, "created_at": ...,
"updated_at": ...}`` with the message in the Bedrock Converse shape (``toolUse``, no nulls). Binary
content is ``{"__bytes_encoded__": true, "data": "<base64>"}``, Strands' marker, so that either framework
reads the other's files. Strands adds ``tracking_id`` and ``metadata`` to messages; orchestra keeps only
``role`` and ``content`` (the model never sees the others). Files written by orchestra before this
format (snake_case keys, nulls, base64 strings) still load.
"""

from __future__ import annotations

import json
from typing import Any

from orchestra._json import BYTES_MARKER, encode_bytes
from orchestra.errors import SnapshotError
from orchestra.messages import Message, MessageDict

__all__ = ["file_json", "message_from_file", "message_to_file"]


def _markers_to_base64(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(BYTES_MARKER) is True and isinstance(value.get("data"), str):
            return value["data"]
        return {k: _markers_to_base64(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_markers_to_base64(v) for v in value]
    return value


def file_json(value: Any) -> bytes:
    """A file's bytes: JSON with binary content as markers."""
    return json.dumps(encode_bytes(value), ensure_ascii=False).encode()


def message_to_file(message: MessageDict) -> dict[str, Any]:
    """A message as the repository layout stores it (plain Converse shape; bytes become markers)."""
    return encode_bytes(message)  # type: ignore[no-any-return]


def message_from_file(raw: Any, where: str) -> MessageDict:
    """A stored message (from either framework) as orchestra's plain message.

    Raises:
        SnapshotError: the message is not one orchestra can load; names ``where`` and the field.
    """
    if not isinstance(raw, dict):
        raise SnapshotError(f"{where}: a message is a JSON object, not {type(raw).__name__}")
    core = {k: raw[k] for k in ("role", "content") if k in raw}
    try:
        # JSON mode: binary content arrives as base64 (a marker's data, or an older orchestra file's string).
        parsed = Message.model_validate_json(json.dumps(_markers_to_base64(core)))
    except ValueError as exc:
        problem = str(exc).splitlines()
        detail = "; ".join(line.strip() for line in problem[1:3]) or str(exc)
        raise SnapshotError(
            f"{where}: not a message orchestra can load ({detail}). Nothing was overwritten; content kinds "
            "orchestra supports are text, toolUse, toolResult, image and document"
        ) from None
    return parsed.model_dump(by_alias=True, exclude_none=True)
