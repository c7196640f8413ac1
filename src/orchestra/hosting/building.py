"""The agent or pipeline a run runs: kept since its session's last turn, put back as built after a turn
that keeps nothing, or built from its spec (its session loaded) - and kept again after the turn.

- **session** (``session_id``): the agent (or pipeline) is attached to a ``SnapshotSessionManager`` over
  the workspace's storage, which restores the whole conversation and saves the new turn. A plain or
  ``enqueue`` turn of an agent reuses the agent kept since the session's last turn
  (``session_cache.py``), once one read says nothing was written since (``is_current``).
- **stateless** (``history``): the history is the agent's starting conversation (for a pipeline, it is
  put before the task as context); nothing is persisted.
- **none**: a fresh agent or pipeline, nothing persisted.
"""

from __future__ import annotations

from typing import Any

from orchestra.agent import Agent
from orchestra.agent.agent import deferred_initialization
from orchestra.errors import SessionConflictError, SnapshotError
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.invocation import Invocation
from orchestra.hosting.session_cache import FreshAgents, SessionCache, cache_key, cacheable, keeps_nothing
from orchestra.hosting.stopping import Stopped
from orchestra.hosting.workspaces import Workspaces
from orchestra.multiagent import MultiAgentBase
from orchestra.multiagent.events import BeforeMultiAgentInvocation
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.spec import build

__all__ = ["SERVER_COMPACTION", "Builder"]

# Every request loads its session, so the server folds the journal often: a load reads at most 16 records.
SERVER_COMPACTION = Compaction(min_bytes=8 * 1024, ratio=2.0, max_records=16)


def _history_messages(history: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"role": turn["role"], "content": [{"text": turn["content"]}]} for turn in history]


class Builder:
    """Builds (or takes back) the target of each run (see the module docstring)."""

    def __init__(self, config: ServerConfig, workspaces: Workspaces) -> None:
        self.config = config
        self.workspaces = workspaces
        self.fresh = FreshAgents()
        self.sessions = SessionCache(
            config.limits.cached_sessions, int(config.limits.cached_session_mb * 2**20)
        )

    async def build(self, invocation: Invocation) -> Agent | MultiAgentBase:
        """The run's target, its session loaded (session mode)."""
        hosted = invocation.hosted
        loaded = self.config.spec_of(hosted.id)
        manager = None
        kind, session_id = loaded.spec.kind, invocation.session_id
        if self.uses_cache(invocation, kind):  # the agent kept since the session's last turn
            cached = self.sessions.take(cache_key(hosted.workspace, hosted.id, session_id))
            if cached is not None:
                assert isinstance(cached.session_manager, SnapshotSessionManager)
                # Before its history reaches the model: another server may have written or deleted the
                # session since (else it is loaded afresh below).
                if await cached.session_manager.is_current(cached):
                    cached.session_manager.run_id = invocation.run_id
                    return cached
        elif session_id is not None:  # this run writes the session: an agent kept for it would be behind
            self.sessions.forget(hosted.workspace, hosted.id, session_id)
        fresh = self.fresh.take(hosted.id) if keeps_nothing(session_id, kind) else None
        if fresh is not None:
            if invocation.history is not None:
                fresh.messages = _history_messages(invocation.history)
            return fresh
        if invocation.session_id is not None:
            storage = self.workspaces.agent_storage(hosted.workspace, hosted.id)
            manager = SnapshotSessionManager(
                invocation.session_id,
                storage=storage,
                compaction=SERVER_COMPACTION,
                keep_dropped_messages=True,  # the whole conversation stays readable (docs/server.md)
            )
            manager.run_id = invocation.run_id  # every journal record of the turn names its run
        with deferred_initialization():  # the session loads below, on this event loop, without blocking it
            # A spec's memory: is the workspace's store here (each run binds its caller's namespace in it).
            memory = (
                self.workspaces.memory.store(hosted.workspace) if loaded.spec.memory is not None else None
            )
            built: Agent | MultiAgentBase = build(loaded, session_manager=manager, memory=memory)
        if isinstance(built, Agent):
            await built.initialize()
            if keeps_nothing(session_id, kind):
                self.fresh.built(built)
            if invocation.history is not None:
                built.messages = _history_messages(invocation.history)
        elif invocation.responses is not None and manager is not None:
            # Load the saved run now (the invocation will not load it again), to check the answers.
            await built.hooks.invoke(BeforeMultiAgentInvocation(built, {}))
        return built

    @staticmethod
    def task(invocation: Invocation, target: Agent | MultiAgentBase) -> str | None:
        """What the target is given: the task (a pipeline in stateless mode: after the history)."""
        if isinstance(target, MultiAgentBase) and invocation.history:
            context = "\n".join(f"{turn['role']}: {turn['content']}" for turn in invocation.history)
            return f"Conversation so far:\n{context}\n\n{invocation.task}"
        return invocation.task

    @staticmethod
    def uses_cache(invocation: Invocation, kind: str) -> bool:
        """Plain and ``enqueue`` turns keep their session's agent between turns; another run of the
        session (in the background, or with another policy) loads it (it may follow a run of another
        server: the busy document says so, a kept agent would not)."""
        if not invocation.keeps_agent:
            return False
        return cacheable(invocation.session_id, invocation.history, kind)

    def keep(self, workspace: str, invocation: Invocation, target: Any, outcome: Any) -> None:
        """After a turn, keep the session's agent for the next one, unless what it holds may no longer be
        the session as stored: another writer won (409), a stored file was damaged, or a stop changed
        the session under it (a rollback). An agent of a turn that keeps nothing is put back as built."""
        hosted, kind = invocation.hosted, self.config.spec_of(invocation.hosted.id).spec.kind
        if isinstance(target, Agent) and keeps_nothing(invocation.session_id, kind):
            self.fresh.give_back(hosted.id, target)
            return
        if not isinstance(target, Agent) or not self.uses_cache(invocation, kind):
            return
        if isinstance(outcome, SessionConflictError | SnapshotError | Stopped):
            return
        self.sessions.give_back(cache_key(workspace, hosted.id, invocation.session_id), target)

    def forget(self, workspace: str, agent_id: str, session_id: str) -> None:
        """Drop a session's kept agent (another server had the session since, or it was deleted)."""
        self.sessions.forget(workspace, agent_id, session_id)
