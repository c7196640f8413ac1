"""A scope's *document* (named JSON fields and append-mostly logs) and what a journal record does to it:
``Document.apply`` replays a record; ``diff_log`` finds the smallest change that turns one log into
another, by identity, so that finding what changed never re-serializes a history; ``op_json`` writes that
change. No I/O: the journal (``_journal.py``) reads and writes the records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from orchestra.errors import SnapshotError
from orchestra.messages import Message
from orchestra.session.snapshot import LogOp, Record

__all__ = ["Document", "decode_messages", "diff_log", "is_message_log", "op_json"]


@dataclass
class Document:
    """A scope's state: JSON fields and append-mostly logs."""

    fields: dict[str, Any] = field(default_factory=dict)
    logs: dict[str, list[Any]] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict, compare=False)
    """Where each field and log first came from (a snapshot's or a record's key), for errors that name
    the file (filled by loads)."""

    def apply(self, record: Record, where: str | None = None) -> None:
        """Replay ``record`` (read from the key ``where``).

        Raises:
            SnapshotError: a log does not have the length the record was written against: a record is
                missing, or one was replayed twice (the snapshot and the journal disagree).
        """
        if record.deleted:  # a tombstone: the scope starts again from nothing
            self.fields, self.logs, self.origins = {}, {}, {}
            return
        for name, op in record.logs.items():
            old = self.logs.get(name, [])
            if op.at is not None and op.at != len(old):
                raise SnapshotError(
                    f"{where or 'a journal record'}: log {name!r} had {op.at} items when this record was "
                    f"written, but replaying the snapshot and the records before it gives {len(old)}: a "
                    "record is missing or counted twice (a snapshot's journal.seq that disagrees with the "
                    "journal, or a damaged journal). Nothing was loaded; restore the session from an "
                    "export or an immutable snapshot"
                )
            keep = len(old) - op.drop if op.keep is None else op.keep
            self.logs[name] = [*old[op.drop : op.drop + keep], *op.add]
        self.fields.update(record.set)
        for name in record.unset:
            self.fields.pop(name, None)
        if where is not None:
            for name in (*record.set, *record.logs):
                self.origins.setdefault(name, where)

    def flat(self) -> dict[str, Any]:
        return {**self.fields, **self.logs}


def is_message_log(name: str) -> bool:
    """Logs named ``messages`` or ``.../messages`` hold conversation messages (binary content inside)."""
    return name == "messages" or name.endswith("/messages")


def _has_binary(message: Any) -> bool:
    for block in message.get("content", ()):
        if "image" in block or "document" in block:
            return True
        result = block.get("toolResult")
        if result and any("image" in c or "document" in c for c in result.get("content", ())):
            return True
    return False


def decode_messages(items: list[Any], key: str, *, checked: bool = True) -> list[Any]:
    """Messages as stored (base64 strings for bytes) back to their plain form (bytes).

    A file whose bytes are not ``checked`` (one written before checksums) has each message validated
    (``Message``), so that a damaged name is refused here, naming the file, instead of failing wherever
    it is read later; a checked file's messages are exactly as orchestra wrote them."""
    if not checked:
        for index, item in enumerate(items):
            _check_message(item, index, key)
    out = []
    for item in items:
        if isinstance(item, dict) and _has_binary(item):
            try:
                item = Message.model_validate_json(json.dumps(item)).model_dump(
                    by_alias=True, exclude_none=True
                )
            except ValueError as exc:
                raise SnapshotError(f"{key}: a stored message is not valid: {exc}") from None
        out.append(item)
    return out


def _check_message(item: Any, index: int, key: str) -> None:
    problem = None
    if not isinstance(item, dict) or item.get("role") not in ("user", "assistant"):
        problem = "it has no role, user or assistant"
    else:
        try:
            Message.model_validate_json(json.dumps(item))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            problem = f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
    if problem is not None:
        raise SnapshotError(
            f"{key}: item {index} of a message log is not a valid message ({problem}): the file is damaged. "
            "Nothing was loaded; restore the session from an export or an immutable snapshot"
        )


def diff_log(old: Sequence[Any], new: Sequence[Any]) -> LogOp | None:
    """The smallest LogOp that turns ``old`` into ``new``: an unchanged prefix by list equality (which
    takes identical items as equal at once), a kept middle run by identity."""
    # The common case, an appended tail: list equality compares the same objects in O(1) each, in C
    # (six times faster than an identity loop; an item replaced by an equal one needs no rewrite either).
    if len(old) <= len(new) and new[: len(old)] == old:
        return LogOp(add=list(new[len(old) :]), at=len(old)) if len(new) > len(old) else None
    drop = None
    if new:
        first = new[0]
        drop = next((i for i, item in enumerate(old) if item is first), None)
    if drop is None:
        return LogOp(drop=len(old), keep=0, add=list(new), at=len(old))
    keep = 0
    while drop + keep < len(old) and keep < len(new) and old[drop + keep] is new[keep]:
        keep += 1
    return LogOp(drop=drop, keep=keep, add=list(new[keep:]), at=len(old))


def op_json(op: LogOp, add_text: str) -> str:
    """``op`` as JSON without its default values (what ``model_dump(exclude_defaults=True)`` gives), its
    added items given as the JSON text ``add_text``."""
    out = [] if op.at is None else [f'"at":{op.at}']
    if op.drop:
        out.append(f'"drop":{op.drop}')
    if op.keep is not None:
        out.append(f'"keep":{op.keep}')
    if op.add:
        out.append(f'"add":{add_text}')
    return "{" + ",".join(out) + "}"
