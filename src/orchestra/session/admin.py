"""Looking after stored sessions: list, describe, history, restore, prune (the CLI and the server use these).

These work on any ``Storage`` holding ``SnapshotSessionManager`` sessions, without the agents or
orchestrators that wrote them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestra._ids import validate_id
from orchestra.errors import SessionError
from orchestra.session._journal import Document, Journal
from orchestra.session._layout import ScopeKind, ScopeLayout, session_prefix
from orchestra.session.snapshot import Snapshot, decode_model
from orchestra.storage import Storage

__all__ = [
    "ScopeInfo",
    "SessionInfo",
    "SnapshotInfo",
    "describe_session",
    "list_sessions",
    "load_scope",
    "prune_sessions",
    "restore_scope",
    "scope_history",
]


@dataclass
class ScopeInfo:
    """One scope of a session: an agent, or a Graph/Swarm."""

    kind: ScopeKind
    scope_id: str
    records: int = 0
    updated_at: datetime | None = None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionInfo:
    session_id: str
    scopes: list[ScopeInfo]

    @property
    def updated_at(self) -> datetime | None:
        times = [s.updated_at for s in self.scopes if s.updated_at is not None]
        return max(times) if times else None


@dataclass
class SnapshotInfo:
    snapshot_id: str
    created_at: str
    journal_seq: int | None
    app_data: dict[str, Any]


def _scopes_of(keys: list[str]) -> dict[str, dict[tuple[str, str], list[str]]]:
    sessions: dict[str, dict[tuple[str, str], list[str]]] = {}
    for key in keys:
        parts = key.split("/")
        if len(parts) < 6 or parts[0] != "session" or parts[2] != "scopes":
            continue
        sessions.setdefault(parts[1], {}).setdefault((parts[3], parts[4]), []).append(key)
    return sessions


async def _last_update(storage: Storage, journal_keys: list[str]) -> datetime | None:
    if not journal_keys:
        return None
    found = await storage.read(journal_keys[-1])
    if found is None:
        return None
    try:
        millis = int(json.loads(found[0])["t"])
    except (ValueError, KeyError, TypeError):
        return None
    return datetime.fromtimestamp(millis / 1000, UTC)


def _summary(kind: str, doc: Document) -> dict[str, Any]:
    if kind == "agent":
        return {
            "messages": len(doc.logs.get("messages", [])),
            "state_keys": sorted(doc.fields.get("state") or {}),
        }
    run = doc.fields.get("run") or {}
    nodes = {
        name[len("node/") :]: record.get("status")
        for name, record in sorted(doc.fields.items())
        if name.startswith("node/") and isinstance(record, dict)
    }
    return {
        "type": run.get("kind"),
        "status": run.get("status"),
        "reason": run.get("reason"),
        "task": doc.fields.get("task"),
        "execution_count": run.get("execution_count"),
        "nodes": nodes,
    }


async def list_sessions(storage: Storage) -> list[SessionInfo]:
    """Every session in the storage with its scopes and when each was last saved."""
    grouped = _scopes_of(await storage.list("session/"))
    out = []
    for session_id, scopes in sorted(grouped.items()):
        infos = []
        for (kind, scope_id), keys in sorted(scopes.items()):
            journal = sorted(k for k in keys if "/journal/" in k)
            infos.append(ScopeInfo(kind, scope_id, len(journal), await _last_update(storage, journal)))  # type: ignore[arg-type]
        out.append(SessionInfo(session_id, infos))
    return out


async def load_scope(storage: Storage, session_id: str, kind: ScopeKind, scope_id: str) -> Document:
    """The current state of one scope.

    Raises:
        SessionError: the session has no such scope.
    """
    doc = await Journal(storage, ScopeLayout(session_id, kind, scope_id)).load()
    if doc is None:
        raise SessionError(f"session {session_id!r} has no {kind} {scope_id!r}")
    return doc


async def describe_session(storage: Storage, session_id: str) -> SessionInfo:
    """A session's scopes, each with a summary of its state (messages, run status, node statuses).

    Raises:
        SessionError: there is no such session.
    """
    validate_id(session_id, "session_id")
    grouped = _scopes_of(await storage.list(session_prefix(session_id)))
    if session_id not in grouped:
        raise SessionError(f"no session {session_id!r} in {storage!r}")
    infos = []
    for (kind, scope_id), keys in sorted(grouped[session_id].items()):
        journal = sorted(k for k in keys if "/journal/" in k)
        doc = await load_scope(storage, session_id, kind, scope_id)  # type: ignore[arg-type]
        infos.append(
            ScopeInfo(kind, scope_id, len(journal), await _last_update(storage, journal), _summary(kind, doc))  # type: ignore[arg-type]
        )
    return SessionInfo(session_id, infos)


async def scope_history(
    storage: Storage, session_id: str, kind: ScopeKind, scope_id: str
) -> list[SnapshotInfo]:
    """The immutable snapshots of a scope, oldest first."""
    layout = ScopeLayout(session_id, kind, scope_id)
    out = []
    for key in await storage.list(layout.immutable):
        found = await storage.read(key)
        if found is None:
            continue
        snapshot = decode_model(Snapshot, found[0], key)
        snapshot_id = key[len(layout.immutable) :].removeprefix("snapshot_").removesuffix(".json")
        seq = snapshot.journal.seq if snapshot.journal else None
        out.append(SnapshotInfo(snapshot_id, snapshot.created_at, seq, snapshot.app_data))
    return out


async def restore_scope(
    storage: Storage, session_id: str, kind: ScopeKind, scope_id: str, snapshot_id: str
) -> None:
    """Make an immutable snapshot the latest state of its scope (the journal keeps what came between)."""
    validate_id(snapshot_id, "snapshot_id")
    journal = Journal(storage, ScopeLayout(session_id, kind, scope_id))
    current = await journal.load()
    if current is None:
        raise SessionError(f"session {session_id!r} has no {kind} {scope_id!r}")
    target, _ = await journal.read_checkpoint(snapshot_id)
    removed = [name for name in current.fields if name not in target.fields]
    logs = {name: target.logs.get(name, []) for name in {*current.logs, *target.logs}}
    await journal.save(target.fields, logs, removed)


async def prune_sessions(storage: Storage, older_than: timedelta, *, dry_run: bool = False) -> list[str]:
    """Delete the sessions not saved for ``older_than``; returns their ids."""
    from orchestra.session.writer_lock import WriterLock

    cutoff = datetime.now(UTC) - older_than
    doomed = [
        info.session_id
        for info in await list_sessions(storage)
        if (info.updated_at is None or info.updated_at < cutoff)
        and not getattr(WriterLock.inspect(storage, info.session_id), "alive", False)  # a live run stays
    ]
    if not dry_run:
        for session_id in doomed:
            await storage.delete_prefix(session_prefix(session_id))
    return doomed
