"""Looking after stored sessions: list, describe, history, restore, prune (the CLI and the server use these).

These work on any ``Storage`` holding ``SnapshotSessionManager`` sessions (``session/<id>/``), without the
agents or orchestrators that wrote them. Listing, describing, exporting and pruning also see the repository
layout of ``FileSessionManager`` and ``S3SessionManager`` (``session_<id>/``, Strands Agents' layout too);
an export of such a scope is a snapshot file, so ``import`` moves it to the snapshot layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from orchestra._ids import validate_id
from orchestra.errors import SessionError, SnapshotError
from orchestra.multiagent.details import run_details
from orchestra.session._document import Document
from orchestra.session._erase import erase_session
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeKind, ScopeLayout, session_prefix
from orchestra.session._records import RecordStore
from orchestra.session.snapshot import Snapshot, decode_model
from orchestra.storage import Storage

__all__ = [
    "ScopeInfo",
    "SessionInfo",
    "SnapshotInfo",
    "delete_session",
    "describe_session",
    "export_any_scope",
    "export_repository_scope",
    "list_sessions",
    "load_scope",
    "may_have_live_writer",
    "prune_sessions",
    "restore_scope",
    "scope_history",
    "session_exists",
]


@dataclass
class ScopeInfo:
    """One scope of a session: an agent, or a Graph/Swarm."""

    kind: ScopeKind
    scope_id: str
    records: int = 0
    updated_at: datetime | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False  # its newest record is a delete's tombstone (listed only for pruning)


@dataclass
class SessionInfo:
    session_id: str
    scopes: list[ScopeInfo]
    layout: Literal["snapshot", "repository"] = "snapshot"

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


async def _last_update(
    storage: Storage, layout: ScopeLayout, journal_keys: list[str]
) -> tuple[datetime | None, bool, int]:
    """When the newest record was written, whether it is a tombstone (the scope was deleted), and how
    many records the journal holds."""
    if not journal_keys:
        return None, False, 0
    try:
        newest = await RecordStore(storage, layout).newest(journal_keys)
    except SnapshotError:
        return None, False, len(journal_keys)
    if newest is None:
        return None, False, 0
    count = newest.seq - layout.seq_of(journal_keys[0]) + 1  # records are numbered without gaps
    return datetime.fromtimestamp(newest.record.t / 1000, UTC), newest.record.deleted, count


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
    summary = {
        "type": run.get("kind"),
        "status": run.get("status"),
        "reason": run.get("reason"),
        "task": doc.fields.get("task"),
        "execution_count": run.get("execution_count"),
        "nodes": nodes,
    }
    summary.update(run_details(doc.fields, doc.logs))
    return summary


async def list_sessions(storage: Storage) -> list[SessionInfo]:
    """Every session in the storage (either layout) with its scopes and when each was last saved (a deleted
    one is not listed)."""
    out = []
    for info in await _all_sessions(storage):
        info.scopes = [scope for scope in info.scopes if not scope.deleted]
        if info.scopes:
            out.append(info)
    return out


async def _all_sessions(storage: Storage) -> list[SessionInfo]:
    """``list_sessions``, deleted scopes included (their tombstones are what ``prune_sessions`` removes)."""
    grouped = _scopes_of(await storage.list("session/"))
    out = []
    for session_id, scopes in sorted(grouped.items()):
        infos = []
        for (kind, scope_id), keys in sorted(scopes.items()):
            layout = ScopeLayout(session_id, kind, scope_id)  # type: ignore[arg-type]
            journal = sorted(k for k in keys if k.startswith(layout.journal))
            updated_at, deleted, records = await _last_update(storage, layout, journal)
            infos.append(ScopeInfo(kind, scope_id, records, updated_at, deleted=deleted))  # type: ignore[arg-type]
        out.append(SessionInfo(session_id, infos))
    for session_id in sorted(_repository_sessions(await storage.list("session_"))):
        out.append(await _describe_repository(storage, session_id, summaries=False))
    return out


def _repository_sessions(keys: list[str]) -> dict[str, list[str]]:
    sessions: dict[str, list[str]] = {}
    for key in keys:
        folder, _, rest = key.partition("/")
        if folder.startswith("session_") and rest:
            sessions.setdefault(folder[len("session_") :], []).append(rest)
    return sessions


def _timestamp(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


async def _describe_repository(storage: Storage, session_id: str, *, summaries: bool) -> SessionInfo:
    from orchestra.session.repository import StorageSessionRepository, stored_agent_data

    repo = StorageSessionRepository(storage)
    keys = _repository_sessions(await storage.list(f"session_{validate_id(session_id, 'session_id')}/"))
    scopes = []
    for rest in sorted(keys.get(session_id, [])):
        parts = rest.split("/")
        if len(parts) == 3 and parts[0] == "agents" and parts[2] == "agent.json":
            agent = await repo.read_agent(session_id, parts[1].removeprefix("agent_"))
            if agent is None:
                continue
            info = ScopeInfo("agent", agent.agent_id, updated_at=_timestamp(agent.updated_at))
            info.records = sum(1 for r in keys[session_id] if r.startswith(f"agents/{parts[1]}/messages/"))
            if summaries:
                data, _ = await stored_agent_data(repo, session_id, agent)
                info.summary = {"messages": len(data.messages), "state_keys": sorted(data.state)}
            scopes.append(info)
        elif len(parts) == 3 and parts[0] == "multi_agents" and parts[2] == "multi_agent.json":
            scope_id = parts[1].removeprefix("multi_agent_")
            payload = await repo.read_multi_agent(session_id, scope_id) or {}
            info = ScopeInfo("multiAgent", scope_id, 1, _timestamp(payload.get("updated_at")))
            if summaries:
                info.summary = _summary("multiAgent", Document(fields=payload))
            scopes.append(info)
    return SessionInfo(session_id, scopes, layout="repository")


async def export_any_scope(storage: Storage, session_id: str, kind: ScopeKind, scope_id: str) -> bytes:
    """A scope of either layout as a self-contained snapshot file (the snapshot layout first)."""
    from orchestra.session.snapshot_manager import export_scope

    try:
        return await export_scope(storage, session_id, kind, scope_id)
    except SessionError:
        if not _repository_sessions(await storage.list(f"session_{session_id}/")):
            raise
    return await export_repository_scope(storage, session_id, kind, scope_id)


async def export_repository_scope(storage: Storage, session_id: str, kind: ScopeKind, scope_id: str) -> bytes:
    """A scope of the repository layout as a self-contained snapshot file (what ``export_scope`` writes).

    Raises:
        SessionError: the session has no such scope.
    """
    from orchestra.session.repository import StorageSessionRepository, stored_agent_data

    repo = StorageSessionRepository(storage)
    journal = Journal(storage, ScopeLayout(session_id, kind, scope_id))
    if kind == "agent":
        agent = await repo.read_agent(session_id, scope_id)
        if agent is None:
            raise SessionError(f"session {session_id!r} has no agent {scope_id!r}")
        data, _ = await stored_agent_data(repo, session_id, agent)
        fields = {
            "state": data.state,
            "conversation_manager_state": data.conversation_manager_state,
            "system_prompt": data.system_prompt,
            "interrupt_state": data.interrupt_state,
        }
        return journal.export(Document(fields=fields, logs={"messages": data.messages}))
    payload = await repo.read_multi_agent(session_id, scope_id)
    if payload is None:
        raise SessionError(f"session {session_id!r} has no multiAgent {scope_id!r}")
    if "run" not in payload:
        raise SessionError(
            f"session {session_id!r} multiAgent {scope_id!r} was not written by orchestra (a Strands Agents "
            "run?): only its agents can be exported"
        )
    # An export is flat (fields and logs side by side), as serialize_state is: the import sorts them out.
    return journal.export(
        Document(fields={k: v for k, v in payload.items() if k not in ("id", "updated_at")})
    )


async def session_exists(storage: Storage, session_id: str) -> bool:
    """Whether the storage holds any key of the session, in either layout (one listing of each)."""
    for prefix in (session_prefix(session_id), f"session_{session_id}/"):
        if await storage.list(prefix, limit=1):
            return True
    return False


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
        repository = await _describe_repository(storage, session_id, summaries=True)
        if repository.scopes:
            return repository
        raise SessionError(f"no session {session_id!r} in {storage!r}")
    infos = []
    for (kind, scope_id), keys in sorted(grouped[session_id].items()):
        layout = ScopeLayout(session_id, kind, scope_id)  # type: ignore[arg-type]
        journal = sorted(k for k in keys if k.startswith(layout.journal))
        doc = await Journal(storage, layout).load()
        if doc is None:
            continue  # deleted (its tombstones remain)
        updated_at, _, records = await _last_update(storage, layout, journal)
        infos.append(ScopeInfo(kind, scope_id, records, updated_at, _summary(kind, doc)))  # type: ignore[arg-type]
    if not infos:
        raise SessionError(f"no session {session_id!r} in {storage!r}")
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


LIVE_WRITER_WINDOW = timedelta(minutes=10)
"""A session saved more recently than this may have a live writer that will not check before its next save
(it checks after half of ``Compaction.delete_after``, 10 minutes by default): deleting it could let that
writer recreate a partial scope that does not load. Unless the writer lock says the run is dead."""


def may_have_live_writer(storage: Storage, info: SessionInfo) -> bool:
    """Whether deleting the session now could race a writer that is still running."""
    from orchestra.session.writer_lock import WriterLock

    lock = WriterLock.inspect(storage, info.session_id)
    if lock is not None:
        return bool(lock.alive)
    return info.updated_at is not None and info.updated_at > datetime.now(UTC) - LIVE_WRITER_WINDOW


async def prune_sessions(storage: Storage, older_than: timedelta, *, dry_run: bool = False) -> list[str]:
    """Delete the sessions not saved for ``older_than``; returns their ids. A session that may still have a
    live writer (``may_have_live_writer``) is kept whatever ``older_than`` says. The tombstones a delete
    left go too, once no writer can still be behind them (the same rule: a delete is a save)."""
    cutoff = datetime.now(UTC) - older_than
    doomed: list[str] = []
    tombstones: list[str] = []
    for info in await _all_sessions(storage):
        if (info.updated_at is not None and info.updated_at >= cutoff) or may_have_live_writer(storage, info):
            continue
        deleted = bool(info.scopes) and all(scope.deleted for scope in info.scopes)
        (tombstones if deleted else doomed).append(info.session_id)
    if not dry_run:
        for session_id in doomed:
            await delete_session(storage, session_id)
        for session_id in tombstones:
            await storage.delete_prefix(session_prefix(session_id))
    return doomed


async def delete_session(storage: Storage, session_id: str) -> int:
    """Delete a session, in either layout; returns how many keys held it (0: there was none).

    A writer elsewhere that still holds the session (a server's kept agent, a live process) sees the delete
    before it writes again: each scope is deleted with a tombstone at its next journal record
    (``Journal.erase``), which stays, holding nothing, until the id is used again or pruned."""
    count = await erase_session(storage, session_id)
    return count + await storage.delete_prefix(f"session_{session_id}/")
