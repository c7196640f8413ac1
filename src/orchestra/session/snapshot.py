"""The snapshot format: a versioned pydantic model, and the journal records beside it.

A ``Snapshot`` is what ``snapshot_latest.json``, an immutable snapshot and an export hold::

    {"scope": "agent", "schema_version": 1, "created_at": "...",
     "data": {"messages": [...], "state": {...}, "conversation_manager_state": {...},
              "system_prompt": "...", "interrupt_state": null},
     "app_data": {},
     "journal": {"seq": 41, "logs": ["messages"], "t": 1764601234567}}

Every snapshot, journal record and manifest ends with a checksum, ``"crc32":"<8 hex digits>"``: the
CRC-32 of the file's bytes without that member (``{...}`` as it was before the member was put last).
A load checks it before it parses anything, so a changed byte anywhere (in a message's text, in a field
name) is a ``SnapshotError`` naming the file, never different content or a raw exception. Files written
before checksums have none and load as they are.

``journal`` says which journal record the snapshot reflects (``t`` is that record's time, so a load can
tell that the snapshot and the journal agree) and which ``data`` keys are append-mostly logs. An export has ``journal: null``, names its ``scope_id`` and ``session_id``, and is
self-contained. An immutable snapshot written by a running session has ``data: {}`` and
``journal.ref: true``: it is "the state after record ``seq``", rebuilt from the journal, so it shares
the data instead of copying it.
"""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from orchestra.errors import SnapshotError

__all__ = [
    "CHECKSUM",
    "SCHEMA_VERSION",
    "JournalInfo",
    "LogOp",
    "Record",
    "Snapshot",
    "SnapshotManifest",
    "decode_model",
    "encode_model",
    "encode_snapshot",
    "now_iso",
    "seal",
    "unseal",
]

SCHEMA_VERSION = 1

_M = TypeVar("_M", bound="_Model")


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")
    _checksummed: bool = PrivateAttr(default=False)

    @property
    def checksummed(self) -> bool:
        """Whether the file this was read from carried a checksum (which held: ``decode_model`` checks it)."""
        return self._checksummed


class JournalInfo(_Model):
    """Which journal record a snapshot reflects, and which of its data keys are logs."""

    seq: int
    logs: list[str] = Field(default_factory=list)
    ref: bool = False
    t: int | None = None  # record ``seq``'s own ``t``, checked against it on load (older snapshots: none)


class Snapshot(_Model):
    """A point-in-time snapshot of one scope (an agent, or a Graph/Swarm)."""

    scope: Literal["agent", "multiAgent"]
    schema_version: int = SCHEMA_VERSION
    scope_id: str | None = None  # set in exports, so that an import knows where the scope belongs
    session_id: str | None = None
    created_at: str = Field(default_factory=now_iso)
    data: dict[str, Any] = Field(default_factory=dict)
    app_data: dict[str, Any] = Field(default_factory=dict)
    journal: JournalInfo | None = None


class SnapshotManifest(_Model):
    """A scope's manifest: its schema version and when its latest snapshot was last rewritten."""

    schema_version: int = SCHEMA_VERSION
    updated_at: str = Field(default_factory=now_iso)
    created_at: str | None = None  # written by earlier versions (the frozen corpus has it)
    delete_after_s: float | None = None
    """The last writer's ``Compaction.delete_after`` in seconds (None: not recorded, or it keeps every
    record): ``orchestra sessions compact`` refuses to delete records younger than this."""


class LogOp(_Model):
    """A change to a log: ``new = old[drop : drop + keep] + add`` (``keep`` None means "all the rest")."""

    drop: int = 0
    keep: int | None = None
    add: list[Any] = Field(default_factory=list)
    at: int | None = None  # the log's length before the change, checked when the record is replayed


class Record(_Model):
    """One journal record: what one save changed."""

    t: int  # milliseconds since the epoch
    seq: int | None = None  # its number, on a segment's lines (``_segment.py``); a record file has none
    run: str | None = None  # the run (a hosted invocation) that wrote it, so a run's outcome can be read back
    end: str | None = (
        None  # on the record that ended run ``run`` (its commit point): the status it ended with
    )
    set: dict[str, Any] = Field(default_factory=dict)
    unset: list[str] = Field(default_factory=list, alias="del")
    logs: dict[str, LogOp] = Field(default_factory=dict)
    deleted: bool = False
    """A tombstone: the scope was deleted here (what the records before held is gone). A writer that kept
    the scope in memory meets it at its next record number; a load starts after it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


CHECKSUM = "crc32"
_MEMBER = b',"crc32":"'
_SEALED_TAIL = len(_MEMBER) + 8 + 2  # the member's bytes at the end: ,"crc32":"<8 hex>"}
_RESTORE = (
    "Nothing was loaded or overwritten: restore the session from an export or an immutable snapshot, or "
    "delete it to start over"
)


def seal(data: bytes) -> bytes:
    """A JSON object's bytes with its checksum member put last (see the module docstring)."""
    if not data.endswith(b"}") or data == b"{}":
        raise ValueError("only a JSON object with members can be sealed")
    return b'%s,"crc32":"%08x"}' % (data[:-1], zlib.crc32(data))


def unseal(data: bytes, key: str) -> bool:
    """Check a file's checksum: True if it has one and it holds, False if it has none (a file written
    before checksums). Raises ``SnapshotError`` naming ``key`` if the bytes are not the ones sealed."""
    tail = data[-_SEALED_TAIL:]
    if len(data) <= _SEALED_TAIL or not tail.startswith(_MEMBER) or not tail.endswith(b'"}'):
        return False
    # The CRC of the bytes before the member, then of the "}" that closed them: no copy of the file.
    expected = b"%08x" % zlib.crc32(b"}", zlib.crc32(memoryview(data)[: len(data) - _SEALED_TAIL]))
    if tail[len(_MEMBER) : -2] != expected:
        raise SnapshotError(
            f"{key}: damaged: its checksum ({CHECKSUM} {tail[len(_MEMBER) : -2].decode(errors='replace')}) "
            f"does not match its content ({expected.decode()}), so at least one byte changed after it was "
            f"written (a disk or copy error, or an edit by hand; to keep an edit, remove the file's "
            f'"{CHECKSUM}" member). {_RESTORE}'
        )
    return True


def encode_model(model: BaseModel) -> bytes:
    return seal(model.model_dump_json(by_alias=True, exclude_defaults=False).encode())


def decode_model(cls: type[_M], data: bytes, key: str) -> _M:
    """Parse stored JSON into ``cls``, or raise ``SnapshotError`` naming the key and the problem (a
    checksum that does not match included)."""
    sealed = unseal(data, key)
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(
            f"{key}: not valid JSON ({exc}); the file is corrupt or truncated. Nothing was overwritten: "
            "restore it from a backup or an export, or delete the session to start over"
        ) from None
    if isinstance(raw, dict) and (sealed or CHECKSUM in raw):
        if not sealed:  # the member is there, but not where and as a checksum is written: damage
            raise SnapshotError(f"{key}: damaged: its {CHECKSUM!r} member is not a checksum. {_RESTORE}")
        raw.pop(CHECKSUM, None)
    if isinstance(raw, dict):
        version = raw.get("schema_version", SCHEMA_VERSION)
        if not isinstance(version, int) or isinstance(version, bool):
            raise SnapshotError(
                f"{key}: schema_version {version!r} is not an orchestra schema version (an integer); the "
                "file was written by another system (a Strands Agents snapshot?) or edited by hand. Nothing "
                "was loaded; for a Strands snapshot run 'orchestra sessions import <file> --from strands' into "
                "another session id"
            )
        if version > SCHEMA_VERSION:
            raise SnapshotError(
                f"{key}: schema_version {version} was written by a newer orchestra (this one reads up to "
                f"{SCHEMA_VERSION}); upgrade orchestra to load it"
            )
    try:
        model = cls.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise SnapshotError(
            f"{key}: not a valid {cls.__name__} ({problems}); nothing was overwritten"
        ) from None
    model._checksummed = sealed
    return model


def encode_snapshot(snapshot: Snapshot, data_json: str | None = None) -> bytes:
    """A snapshot as JSON bytes (binary content as base64). Its ``data`` is JSON already, so it is not
    passed through pydantic's serializer, which costs about 14 us a message (140 ms for 10,000); a caller
    that holds ``data`` as JSON text already passes it as ``data_json`` and it is spliced in as it is."""
    from orchestra._json import dumps

    head = snapshot.model_dump(mode="python", exclude={"data"})
    parts = [
        f"{dumps(name)}:{(data_json or dumps(snapshot.data)) if name == 'data' else dumps(head[name])}"
        for name in Snapshot.model_fields
    ]
    return seal(("{" + ",".join(parts) + "}").encode())
