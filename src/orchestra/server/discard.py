"""Discarding a run's turn from its session (the ``rollback`` policy): the session is put back as it was
before the run's first journal record.

Every journal record a hosted run writes names its run (``Record.run``), so the run's records are found
in the session itself. The session is restored with one new record (the state before the first of
them), written under the session's conditional writes like any save: it fails rather than overwrite a
turn another writer stored meanwhile. A scope the run created is deleted. When the records before the run
were folded away (the run began more than the journal's ``delete_after`` ago), the state before it is
gone and nothing is discarded (``False``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestra.agent import Agent
from orchestra.errors import SnapshotError
from orchestra.multiagent import MultiAgentBase
from orchestra.session._journal import Compaction, Journal
from orchestra.session._layout import ScopeKind, ScopeLayout
from orchestra.storage import Storage

__all__ = ["discard_run", "stored_by"]


def _scopes(target: Agent | MultiAgentBase) -> list[tuple[ScopeKind, str]]:
    if isinstance(target, Agent):
        return [("agent", target.agent_id)]
    return [("multiAgent", scope.scope_id) for scope in target.orchestrators()]


def _started_ms(started_at: str) -> int:
    return int(datetime.fromisoformat(started_at).timestamp() * 1000)


async def stored_by(
    storage: Storage, target: Agent | MultiAgentBase, session_id: str, run_id: str, started_at: str
) -> bool:
    """Whether run ``run_id`` wrote any journal record to its session (its turn, or part of it)."""
    for kind, scope_id in _scopes(target):
        journal = Journal(storage, ScopeLayout(session_id, kind, scope_id))
        written, _ = await journal.run_records(run_id, _started_ms(started_at))
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
    """Put the session back as it was before run ``run_id`` (see the module docstring); False when the
    state before it can no longer be read."""
    for kind, scope_id in _scopes(target):
        journal = Journal(storage, ScopeLayout(session_id, kind, scope_id), compaction)
        if await journal.load() is None:
            continue
        written, sure = await journal.run_records(run_id, _started_ms(started_at))
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
