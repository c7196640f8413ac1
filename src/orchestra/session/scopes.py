"""A session's scopes, for the layers above sessions (hosting, the CLI, Temporal): open one, read the
journal records a run wrote to it, take a run back out of it.

A scope is one agent, or one Graph/Swarm (and each orchestrator nested in it), inside a session:
``session/<session_id>/scopes/<agent|multiAgent>/<id>/``, written by a ``Journal`` (``ScopeLayout`` names its
keys). Every journal record a hosted run writes names the run (``Record.run``; the session manager's
``run_id``), so what a run did is read from the session itself:

- ``open_scope``: the journal of one scope (load it, read its records, save, compact, fold);
- ``scopes_of``: the scopes a built agent or pipeline writes;
- ``stored_by``: whether a run wrote any record to its session;
- ``discard_run``: put the session back as it was before a run (the ``rollback`` policy).

A writer kept between turns rechecks that it still holds the session as stored with
``SnapshotSessionManager.is_current`` (one read).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestra.agent import Agent
from orchestra.errors import SnapshotError
from orchestra.multiagent import MultiAgentBase
from orchestra.session._document import Document, decode_messages
from orchestra.session._journal import Compaction, Journal, writers_delete_after
from orchestra.session._layout import ScopeKind, ScopeLayout, session_prefix
from orchestra.storage import Storage

__all__ = [
    "Compaction",
    "Document",
    "Journal",
    "ScopeKind",
    "ScopeLayout",
    "decode_messages",
    "discard_run",
    "open_scope",
    "scopes_of",
    "session_prefix",
    "started_ms",
    "stored_by",
    "writers_delete_after",
]


def open_scope(
    storage: Storage, session_id: str, kind: ScopeKind, scope_id: str, compaction: Compaction | None = None
) -> Journal:
    """The journal of one scope of a session (nothing is read until it is loaded)."""
    return Journal(storage, ScopeLayout(session_id, kind, scope_id), compaction)


def scopes_of(target: Agent | MultiAgentBase) -> list[tuple[ScopeKind, str]]:
    """The scopes ``target`` writes in its session: an agent's one, or a pipeline's and its nested ones'."""
    if isinstance(target, Agent):
        return [("agent", target.agent_id)]
    return [("multiAgent", scope.scope_id) for scope in target.orchestrators()]


def started_ms(started_at: str) -> int:
    """An ISO 8601 start time as the milliseconds journal records carry (``Record.t``)."""
    return int(datetime.fromisoformat(started_at).timestamp() * 1000)


async def stored_by(
    storage: Storage, target: Agent | MultiAgentBase, session_id: str, run_id: str, started_at: str
) -> bool:
    """Whether run ``run_id`` wrote any journal record to its session (its turn, or part of it)."""
    for kind, scope_id in scopes_of(target):
        written, _ = await open_scope(storage, session_id, kind, scope_id).run_records(
            run_id, started_ms(started_at)
        )
        if written:
            return True
    return False


async def discard_run(
    storage: Storage,
    target: Agent | MultiAgentBase,
    session_id: str,
    run_id: str,
    started_at: str,
    compaction: Compaction | None = None,
) -> bool:
    """Put the session back as it was before run ``run_id``; False when the state before it can no longer
    be read.

    The session is restored with one new record (the state before the run's first record), written
    under the session's conditional writes like any save: it fails rather than overwrite a turn another
    writer stored meanwhile. A scope the run created is deleted. When the records before the run were
    folded away (the run began more than the journal's ``delete_after`` ago), nothing is discarded.
    """
    for kind, scope_id in scopes_of(target):
        journal = open_scope(storage, session_id, kind, scope_id, compaction)
        if await journal.load() is None:
            continue
        written, sure = await journal.run_records(run_id, started_ms(started_at))
        if not written:
            if not sure:
                return False
            continue
        first = written[0][0]
        if first == 0:  # the run created this scope: without it, the scope was not there
            await storage.delete_prefix(journal.layout.prefix)
            continue
        try:
            before = await journal.load_at(first - 1)
        except SnapshotError:
            return False
        current = journal.current()
        removed = [name for name in current.fields if name not in before.fields]
        logs: dict[str, list[Any]] = {
            name: before.logs.get(name, []) for name in {*current.logs, *before.logs}
        }
        await journal.save(before.fields, logs, removed)
    return True
