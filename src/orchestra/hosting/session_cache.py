"""The agents of recently used sessions, kept between turns so that a turn does not load its session again.

A hosted agent in session mode is built and its session loaded once; later turns reuse it. Nothing is
trusted that a conditional write does not prove: before a kept agent's turn, the record number after its
last one is read (``SnapshotSessionManager.is_current``), so a session another server wrote or deleted
(a delete leaves a tombstone there) is loaded afresh before its history reaches the model; and a turn's
journal record is created under that number, so if another process saved or deleted the session while
the turn ran, the save is refused (409), the entry is dropped, and the next turn loads the session
afresh. The cache is bounded by the number of sessions and by their stored size (least recently used
first out), and an agent is taken out while its turn runs.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from orchestra.agent import Agent
from orchestra.agent.agent import AgentData
from orchestra.session import SnapshotSessionManager

__all__ = ["FreshAgents", "SessionCache", "cache_key", "cacheable", "keeps_nothing"]

SessionKey = tuple[str, str, str]  # workspace, hosted agent id, session id


class SessionCache:
    """At most ``max_sessions`` agents, weighing at most ``max_bytes`` of stored session together."""

    def __init__(self, max_sessions: int, max_bytes: int) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._agents: OrderedDict[SessionKey, tuple[Agent, int]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._agents)

    def take(self, key: SessionKey) -> Agent | None:
        """The cached agent of a session, taken out for its turn (None if none is cached)."""
        found = self._agents.pop(key, None)
        if found is None:
            return None
        self.bytes -= found[1]
        return found[0]

    def give_back(self, key: SessionKey, agent: Agent) -> None:
        """Keep ``agent`` after its turn (it is the session as stored), evicting the least recent."""
        manager = agent.session_manager
        if self.max_sessions <= 0 or not isinstance(manager, SnapshotSessionManager):
            return
        weight = manager.stored_bytes(agent)
        self._agents[key] = (agent, weight)
        self.bytes += weight
        while self._agents and (len(self._agents) > self.max_sessions or self.bytes > self.max_bytes):
            _, (_, dropped) = self._agents.popitem(last=False)
            self.bytes -= dropped

    def forget(self, workspace: str, agent_id: str, session_id: str) -> None:
        """Drop a session's agent (the session was deleted)."""
        found = self._agents.pop((workspace, agent_id, session_id), None)
        if found is not None:
            self.bytes -= found[1]


class FreshAgents:
    """Agents built for turns that keep nothing (stateless and no-memory modes), put back as they were
    built after their turn, so that a turn does not build its agent from the spec again (a third of a
    no-memory request's time). At most ``per_agent`` wait per hosted agent."""

    def __init__(self, per_agent: int = 64) -> None:
        self.per_agent = per_agent
        self._idle: dict[str, list[tuple[Agent, AgentData]]] = {}
        self._built_as: dict[int, AgentData] = {}

    def take(self, hosted_id: str) -> Agent | None:
        idle = self._idle.get(hosted_id)
        if not idle:
            return None
        agent, data = idle.pop()
        self._built_as[id(agent)] = data
        return agent

    def built(self, agent: Agent) -> None:
        """Remember how a newly built agent was, to put it back so after its turn."""
        self._built_as[id(agent)] = copy.deepcopy(agent.agent_data())

    def give_back(self, hosted_id: str, agent: Agent) -> None:
        data = self._built_as.pop(id(agent), None)
        idle = self._idle.setdefault(hosted_id, [])
        if data is None or len(idle) >= self.per_agent:
            return
        reset = getattr(agent.model, "reset", None)  # a test model's script and request log start over
        if reset is not None:
            reset()
        agent.load_agent_data(_copy(data))
        idle.append((agent, data))


def _copy(data: AgentData) -> AgentData:
    """A deep copy of ``data``, without ``copy.deepcopy``'s cost for what a built agent mostly holds:
    empty lists and dicts, and dicts of plain values (a conversation manager's state)."""
    return AgentData(**{name: _copy_value(value) for name, value in vars(data).items()})


def _copy_value(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and all(v is None or isinstance(v, str | int | float) for v in value.values()):
        return dict(value)
    if isinstance(value, list) and not value:
        return []
    return copy.deepcopy(value)


def cacheable(session_id: str | None, history: object, kind: str) -> bool:
    """A session-mode turn of a hosted agent (not a pipeline): its agent may be kept between turns."""
    return session_id is not None and history is None and kind == "agent"


def keeps_nothing(session_id: str | None, kind: str) -> bool:
    """A stateless or no-memory turn of a hosted agent: its agent may be put back as built and reused."""
    return session_id is None and kind == "agent"


def cache_key(workspace: str, hosted_id: str, session_id: str | None) -> SessionKey:
    assert session_id is not None
    return (workspace, hosted_id, session_id)
