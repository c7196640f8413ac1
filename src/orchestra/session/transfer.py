"""Copying runs between sessions: ``fork_scope`` (from a snapshot into a new session), ``import_scope``
(what ``export_scope`` wrote) and ``import_strands_snapshot`` (an agent snapshot of Strands Agents).

A fork of a Graph or Swarm takes its nested orchestrators' scopes along (``<id>.<node>``), each at the
snapshot of the same id when there is one (``SnapshotSessionManager.save_run_snapshot`` takes them
together), otherwise at its latest state.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestra._ids import validate_id
from orchestra.errors import SessionError, SnapshotError
from orchestra.session._document import Document, is_message_log
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeKind, ScopeLayout, session_prefix
from orchestra.session._strands_files import message_from_file
from orchestra.session.snapshot import Snapshot, decode_model, encode_snapshot

__all__ = ["fork_scope", "import_scope", "import_strands_snapshot", "strands_snapshot_ids"]

_ORCHESTRATOR_LOGS = ("execution_order", "node_history", "handoffs")


async def _create(storage: Any, session_id: str, kind: ScopeKind, scope_id: str, doc: Document) -> None:
    journal = Journal(storage, ScopeLayout(session_id, kind, scope_id))
    if await journal.load() is not None:
        raise SessionError(
            f"session {session_id!r} already has {'an' if kind[0] in 'aeiou' else 'a'} {kind} {scope_id!r}: choose another session id, or "
            "delete that session first"
        )
    await journal.create(doc)


async def _state_at(journal: Journal, snapshot_id: str | None) -> Document | None:
    if snapshot_id is None:
        return await journal.load()
    if await journal.load() is None:
        return None
    try:
        doc, _ = await journal.read_checkpoint(snapshot_id)
    except SnapshotError:
        return None
    return doc


async def fork_scope(
    storage: Any,
    session_id: str,
    kind: ScopeKind,
    scope_id: str,
    new_session_id: str,
    snapshot_id: str | None = None,
) -> list[str]:
    """Copy a scope (at an immutable snapshot, or at its latest state) into a new session.

    The new session then resumes from there (``orchestra resume ... --session-id NEW``) while the
    original stays as it is. Returns the scopes copied, as ``kind/id``.

    Raises:
        SessionError: no such scope or snapshot, or the new session already holds the scope.
    """
    validate_id(new_session_id, "session_id")
    if snapshot_id is not None:
        validate_id(snapshot_id, "snapshot_id")
    source = Journal(storage, ScopeLayout(session_id, kind, scope_id))
    doc = await _state_at(source, snapshot_id)
    if doc is None:
        at = f" at snapshot {snapshot_id!r}" if snapshot_id else ""
        raise SessionError(f"session {session_id!r} has no {kind} {scope_id!r}{at}")
    await _create(storage, new_session_id, kind, scope_id, doc)
    copied = [f"{kind}/{scope_id}"]
    if kind == "multiAgent":
        prefix = f"{session_prefix(session_id)}scopes/multiAgent/"
        nested = sorted(
            {key[len(prefix) :].split("/", 1)[0] for key in await storage.list(prefix)} - {scope_id}
        )
        for inner_id in (n for n in nested if n.startswith(f"{scope_id}.")):
            inner = Journal(storage, ScopeLayout(session_id, kind, inner_id))
            inner_doc = await _state_at(inner, snapshot_id) or await inner.load()
            if inner_doc is not None:
                await _create(storage, new_session_id, kind, inner_id, inner_doc)
                copied.append(f"{kind}/{inner_id}")
    return copied


def _document_of(snapshot: Snapshot) -> Document:
    """An export's data as a document: logs are the message logs and the orchestrators' known logs."""
    doc = Document()
    for name, value in snapshot.data.items():
        if isinstance(value, list) and (is_message_log(name) or name in _ORCHESTRATOR_LOGS):
            doc.logs[name] = value
        else:
            doc.fields[name] = value
    return doc


async def import_scope(storage: Any, data: bytes, session_id: str | None = None) -> tuple[str, str, str]:
    """Store what ``export_scope`` wrote as a scope of a session (its own, or ``session_id``).

    Returns (session id, kind, scope id). A resume then continues the run where the export left it.

    Raises:
        SnapshotError: the file is not an export, or names no scope (an export older than this version:
            pass the ids by importing it with the Python API after setting ``scope_id``).
        SessionError: the session already holds that scope.
    """
    snapshot = decode_model(Snapshot, data, "the imported file")
    if snapshot.scope_id is None:
        raise SnapshotError(
            "the imported file names no scope id (it was exported by an older orchestra); export it again "
            "with this version"
        )
    target_session = session_id or snapshot.session_id
    if target_session is None:
        raise SnapshotError("the imported file names no session: pass session_id (--session-id)")
    validate_id(target_session, "session_id")
    # Binary content stays base64 text here; loading the scope decodes it, as for any stored message.
    doc = _document_of(snapshot)
    await _create(storage, target_session, snapshot.scope, snapshot.scope_id, doc)
    return target_session, snapshot.scope, snapshot.scope_id


_STRANDS_PATH = re.compile(r"session/(?P<session>[^/]+)/scopes/agent/(?P<agent>[^/]+)/snapshots/[^/]+\.json$")


def strands_snapshot_ids(path: str) -> tuple[str | None, str | None]:
    """The session and agent ids in a Strands snapshot file's path (``.../session/<s>/scopes/agent/<a>/...``)."""
    match = _STRANDS_PATH.search(path.replace("\\", "/"))
    return (match["session"], match["agent"]) if match else (None, None)


def _system_prompt(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, dict) and isinstance(b.get("text"), str) for b in value):
        return "\n".join(b["text"] for b in value)
    raise SnapshotError(
        f"{where}: data.system_prompt holds blocks other than text; orchestra keeps a text prompt"
    )


async def import_strands_snapshot(
    storage: Any, data: bytes, where: str, session_id: str, agent_id: str
) -> tuple[str, str, str]:
    """Store an agent snapshot of Strands Agents' ``SnapshotSessionManager`` (``snapshot_latest.json`` or an
    immutable snapshot, schema version "1.0") as an orchestra agent scope. Returns (session, kind, scope).

    Raises:
        SnapshotError: the file is not a Strands agent snapshot orchestra can take; names ``where`` and the
            field.
        SessionError: the session already holds that agent.
    """
    validate_id(session_id, "session_id")
    validate_id(agent_id, "agent_id")
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), dict):
        raise SnapshotError(f"{where}: not a Strands Agents snapshot (no 'data' object)")
    version = raw.get("schema_version")
    if isinstance(version, int):
        raise SnapshotError(
            f"{where}: an orchestra snapshot, not a Strands one: import it without --from strands"
        )
    if version != "1.0":
        raise SnapshotError(
            f'{where}: schema_version {version!r} is not a Strands snapshot version orchestra reads ("1.0")'
        )
    if raw.get("scope") != "agent":
        raise SnapshotError(
            f"{where}: scope {raw.get('scope')!r}: only agent snapshots can be imported (a Strands Graph or "
            "Swarm run cannot continue in orchestra; import its agents' snapshots instead)"
        )
    body = raw["data"]
    interrupts = body.get("interrupt_state") or {}
    if isinstance(interrupts, dict) and interrupts.get("activated"):
        raise SnapshotError(
            f"{where}: data.interrupt_state: the agent is waiting for an interrupt to be answered; answer it in "
            "Strands Agents first, then import the snapshot saved after that"
        )
    messages = body.get("messages") or []
    if not isinstance(messages, list):
        raise SnapshotError(f"{where}: data.messages is not a list")
    snapshot = Snapshot(
        scope="agent",
        scope_id=agent_id,
        session_id=session_id,
        data={
            "messages": [
                message_from_file(m, f"{where}: data.messages[{i}]") for i, m in enumerate(messages)
            ],
            "state": body.get("state") or {},
            "conversation_manager_state": body.get("conversation_manager_state") or {},
            "system_prompt": _system_prompt(body.get("system_prompt"), where),
            "interrupt_state": None,
        },
    )
    return await import_scope(storage, encode_snapshot(snapshot), session_id)
