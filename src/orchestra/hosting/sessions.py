"""A hosted agent's sessions as the API and the dashboard show them: listed, each scope's whole
conversation (also what the conversation manager no longer gives the model), and deleted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestra.errors import OrchestraError, SnapshotError
from orchestra.hosting import wait_index
from orchestra.hosting.building import Builder
from orchestra.hosting.events import delete_events
from orchestra.hosting.outcomes import Refused
from orchestra.hosting.workspaces import Workspaces
from orchestra.session import admin
from orchestra.session.snapshot_manager import whole_conversation

__all__ = ["ScopeView", "SessionSummary", "Sessions", "UnknownSession"]


class UnknownSession(Refused):
    """The agent has no such session (404)."""

    def __init__(self, agent_id: str, session_id: str) -> None:
        super().__init__(404, "unknown_session", f"agent {agent_id!r} has no session {session_id!r}")


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    updated_at: datetime | None


@dataclass(frozen=True)
class ScopeView:
    """One scope of a session: an agent's whole conversation (``context_start``: where what the model is
    given starts) and state, or a pipeline's run summary and its agent nodes' conversations."""

    kind: str
    scope_id: str
    summary: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None
    context_start: int | None = None
    state: dict[str, Any] | None = None
    nodes: dict[str, list[Any]] | None = None


class Sessions:
    """The sessions of hosted agents (see the module docstring)."""

    def __init__(self, workspaces: Workspaces, builder: Builder) -> None:
        self.workspaces = workspaces
        self.builder = builder

    async def summaries(self, workspace: str, agent_id: str) -> list[SessionSummary]:
        """The agent's sessions, most recently saved first."""
        infos = await admin.list_sessions(self.workspaces.agent_storage(workspace, agent_id))
        infos.sort(key=lambda i: i.updated_at.isoformat() if i.updated_at else "", reverse=True)
        return [SessionSummary(i.session_id, i.updated_at) for i in infos]

    async def describe(self, workspace: str, agent_id: str, session_id: str) -> list[ScopeView]:
        """Every scope of a session.

        Raises:
            UnknownSession: there is no such session.
            SnapshotError: it is damaged (a kept agent of it is dropped: the next message loads it, and is
                refused the same way).
        """
        storage = self.workspaces.agent_storage(workspace, agent_id)
        try:
            info = await admin.describe_session(storage, session_id)
        except SnapshotError:
            self.builder.forget(workspace, agent_id, session_id)
            raise
        except (OrchestraError, ValueError):
            raise UnknownSession(agent_id, session_id) from None
        views = []
        for scope in info.scopes:
            doc = await admin.load_scope(storage, session_id, scope.kind, scope.scope_id)
            if scope.kind == "agent":
                messages, start = whole_conversation(doc)
                state = doc.fields.get("state") or {}
                views.append(ScopeView(scope.kind, scope.scope_id, scope.summary, messages, start, state))
            else:
                nodes = {
                    name[len("agent/") : -len("/messages")]: items
                    for name, items in doc.logs.items()
                    if name.startswith("agent/") and name.endswith("/messages")
                }
                views.append(ScopeView(scope.kind, scope.scope_id, scope.summary, nodes=nodes))
        return views

    async def delete(self, workspace: str, agent_id: str, session_id: str) -> None:
        """Delete a session: every server's kept agent of it meets the delete before it writes
        (``admin.delete_session``); its busy document goes, and so do the records, event logs, waits
        and inbox of its runs that ended.

        Raises:
            UnknownSession: there is no such session.
        """
        self.builder.forget(workspace, agent_id, session_id)
        # What the server kept of the session's runs goes first (their records: inputs, outputs,
        # conversations; event logs, waits and inbox): if this stops half way, the session is still there
        # and the delete can be made again.
        storage = self.workspaces.storage(workspace)
        ended = await self.workspaces.runs(workspace).forget_session(agent_id, session_id)
        await delete_events(storage, ended)
        await wait_index.forget_session(storage, agent_id, session_id)
        removed = await admin.delete_session(self.workspaces.agent_storage(workspace, agent_id), session_id)
        if not removed:
            raise UnknownSession(agent_id, session_id)
        await self.workspaces.queues(workspace).forget(agent_id, session_id)
