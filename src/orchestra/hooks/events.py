"""The events an agent emits to its hooks.

Every event carries the agent (an ``Agent``, typed as ``orchestra.agent.protocol.AgentLike``, which names
no hook); events inside an invocation also carry ``invocation_state``, the very dict passed to the
invocation (by reference, so a hook's change is seen by later hooks and tools).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestra.hooks.registry import HookEvent
from orchestra.messages import MessageDict, ToolResultDict, Usage

if TYPE_CHECKING:
    from orchestra.agent.protocol import AgentLike
    from orchestra.agent.result import AgentResult

__all__ = [
    "AfterInvocation",
    "AfterModelCall",
    "AfterToolCall",
    "AgentInitialized",
    "BeforeInvocation",
    "BeforeModelCall",
    "BeforeToolCall",
    "MessageAdded",
    "MessageRedacted",
    "TurnCheckpoint",
]


@dataclass
class AgentInitialized(HookEvent):
    """The agent was constructed (session managers restore the saved state here)."""

    agent: AgentLike


@dataclass
class BeforeInvocation(HookEvent):
    """An invocation starts, before the prompt is added to the history."""

    agent: AgentLike
    invocation_state: dict[str, Any]


@dataclass
class AfterInvocation(HookEvent):
    """An invocation ended, successfully (``result``) or not (``exception``).

    After a successful turn this is where session managers save it: its commit point. A callback that
    raises before the turn is stored rolls the turn back like any failure; a session manager sets
    ``stored`` once the turn is in storage, and an error raised after that keeps the turn and says so.
    """

    agent: AgentLike
    invocation_state: dict[str, Any]
    result: AgentResult | None = None
    exception: BaseException | None = None
    stored: bool = False
    reverse_order = True


@dataclass
class MessageAdded(HookEvent):
    """A message was appended to ``agent.messages``."""

    agent: AgentLike
    message: MessageDict
    invocation_state: dict[str, Any] = field(default_factory=dict)


@dataclass
class MessageRedacted(HookEvent):
    """A message of the history was replaced by a redacted version (persisted under every save strategy)."""

    agent: AgentLike
    index: int
    message: MessageDict
    previous: MessageDict | None = None
    """The message before redaction: session managers erase every stored copy of it."""


@dataclass
class BeforeModelCall(HookEvent):
    """The model is about to be called with the current history.

    A hook may append text to ``system_context``: it follows the system prompt in this call's request
    only, and is never stored in the history or a session (``orchestra.memory.MemoryContext`` puts
    relevant memories there).
    """

    agent: AgentLike
    invocation_state: dict[str, Any]
    system_context: list[str] = field(default_factory=list)


@dataclass
class AfterModelCall(HookEvent):
    """The model answered (``message``, ``stop_reason``, the call's ``usage``) or raised (``exception``).

    When it raised, a hook may set ``retry`` to make the same call again (``BeforeModelCall`` first, as
    for any call): that is how ``Agent(retry=...)`` retries. A stream's reader may have seen the first
    chunks of the failed call's reply; the history never holds them.
    """

    agent: AgentLike
    invocation_state: dict[str, Any]
    message: MessageDict | None = None
    stop_reason: str | None = None
    exception: BaseException | None = None
    usage: Usage | None = None
    retry: bool = False
    reverse_order = True


@dataclass
class BeforeToolCall(HookEvent):
    """A tool is about to run. Set ``cancel`` to a message to skip it (the model sees an error result)."""

    agent: AgentLike
    tool_use: dict[str, Any]
    invocation_state: dict[str, Any]
    cancel: str | None = None


@dataclass
class AfterToolCall(HookEvent):
    """A tool ran. ``result`` may be replaced; ``exception`` is what the tool raised, if anything."""

    agent: AgentLike
    tool_use: dict[str, Any]
    invocation_state: dict[str, Any]
    result: ToolResultDict
    exception: BaseException | None = None
    reverse_order = True


@dataclass
class TurnCheckpoint(HookEvent):
    """The turn in progress must be durable before it goes on: a side-effecting tool is about to run, or
    one returned (see ``orchestra.tools.effects``). Session managers save the agent here: its messages up
    to the model's tool calls, and its tool ledger (``interrupt_state``)."""

    agent: AgentLike
    invocation_state: dict[str, Any]
