"""The snapshot format: a versioned pydantic model, and the journal records beside it.

A ``Snapshot`` is what ``snapshot_latest.json``, an immutable snapshot and an export hold::

    {"scope": "agent", "schema_version": 1, "created_at": "...",
     "data": {"messages": [...], "state": {...}, "conversation_manager_state": {...},
              "system_prompt": "...", "interrupt_state": null},
     "app_data": {},
     "journal": {"seq": 41, "logs": ["messages"], "t": 1764601234567}}

``journal`` says which journal record the snapshot reflects (``t`` is that record's time, so a load can
tell that the snapshot and the journal agree) and which ``data`` keys are append-mostly logs. An export has ``journal: null``, names its ``scope_id`` and ``session_id``, and is
self-contained. An immutable snapshot written by a running session has ``data: {}`` and
``journal.ref: true``: it is "the state after record ``seq``", rebuilt from the journal, so it shares
the data instead of copying it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestra.errors import SnapshotError

__all__ = [
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
]

SCHEMA_VERSION = 1

_M = TypeVar("_M", bound=BaseModel)


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


def encode_model(model: BaseModel) -> bytes:
    return model.model_dump_json(by_alias=True, exclude_defaults=False).encode()


def decode_model(cls: type[_M], data: bytes, key: str) -> _M:
    """Parse stored JSON into ``cls``, or raise ``SnapshotError`` naming the key and the problem."""
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(
            f"{key}: not valid JSON ({exc}); the file is corrupt or truncated. Nothing was overwritten: "
            "restore it from a backup or an export, or delete the session to start over"
        ) from None
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
        return cls.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise SnapshotError(
            f"{key}: not a valid {cls.__name__} ({problems}); nothing was overwritten"
        ) from None


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
    return ("{" + ",".join(parts) + "}").encode()
