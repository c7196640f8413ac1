"""What an agent is to the parts it is made of: ``AgentLike``, and ``AgentData``, what a session keeps of it.

Hooks, tools and conversation managers are given the agent that runs them (``event.agent``,
``ToolContext.agent``, ``apply_management(agent)``). At run time that is the ``Agent`` itself; for types
they name this protocol, which imports nothing of theirs, so that ``agent.py`` can import them without a
circle (tests/test_import_rules.py holds the rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from orchestra.messages import MessageDict

if TYPE_CHECKING:
    from orchestra.agent.state import JSONState
    from orchestra.budget import Budget
    from orchestra.hooks.registry import HookRegistry, SessionManager
    from orchestra.interrupts import Interrupt
    from orchestra.models import Model, ToolSpec
    from orchestra.retry import RetryPolicy

__all__ = ["AgentData", "AgentLike", "ToolsLike"]


@dataclass
class AgentData:
    """What a session persists of an agent (what a snapshot trigger receives as ``agent_data``)."""

    messages: list[MessageDict]
    state: dict[str, Any]
    conversation_manager_state: dict[str, Any]
    system_prompt: str | None
    interrupt_state: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ToolsLike(Protocol):
    """An agent's tools as its parts see them (a ``ToolRegistry`` at run time): their names and specs."""

    @property
    def names(self) -> list[str]: ...

    def specs(self) -> list[ToolSpec]: ...

    def __contains__(self, name: object) -> bool: ...


class AgentLike(Protocol):
    """The agent as its hooks, tools and conversation managers see it (an ``Agent`` at run time).

    Attributes:
        name: the agent's human readable name.
        agent_id: the id sessions store it under.
        description: what it does, if said.
        system_prompt: its system prompt.
        messages: its conversation history (managers remove or replace whole messages, never edit one).
        dropped_messages: what conversation managers took out of the history, when a session keeps it
            (see ``bind_session``); None when nobody does.
        state: its agent state (JSON values, never sent to the model).
        hooks: its hook registry.
        session_manager: the session manager it was built with, if any.
        log: its structlog logger (bound to its name).
    """

    name: str
    agent_id: str
    description: str | None
    system_prompt: str | None
    messages: list[MessageDict]
    state: JSONState
    hooks: HookRegistry
    session_manager: SessionManager | None
    log: Any

    @property
    def dropped_messages(self) -> list[MessageDict] | None: ...

    @property
    def tool_registry(self) -> ToolsLike: ...

    @property
    def model(self) -> Model: ...

    @property
    def budget(self) -> Budget | None: ...

    @property
    def retry(self) -> RetryPolicy | None: ...

    @property
    def session_id(self) -> str: ...

    @property
    def effect_scope(self) -> str | None: ...

    def bind_session(self, scope: str, *, dropped_messages: list[MessageDict] | None = None) -> None: ...

    def agent_data(self) -> AgentData: ...

    def load_agent_data(self, data: AgentData) -> None: ...

    def open_interrupts(self) -> list[Interrupt]: ...

    def open_turn(self) -> int | None: ...
