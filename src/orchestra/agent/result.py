"""What an invocation returns, and the events ``stream_async`` yields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestra.interrupts import Interrupt
from orchestra.messages import MessageDict, Usage, text_of
from orchestra.tools import ToolProgressEvent, ToolResultDict

__all__ = [
    "AgentMetrics",
    "AgentResult",
    "AgentStreamEvent",
    "MessageEvent",
    "ResultEvent",
    "TextChunkEvent",
    "ToolCallEvent",
    "ToolProgressEvent",
    "ToolResultEvent",
]


@dataclass
class AgentMetrics:
    """Token usage, loop cycles, tool calls and wall time of one invocation."""

    usage: Usage = field(default_factory=Usage)
    cycles: int = 0
    tool_calls: int = 0
    latency_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "usage": self.usage.model_dump(by_alias=True),
            "cycles": self.cycles,
            "tool_calls": self.tool_calls,
            "latency_ms": round(self.latency_ms, 3),
        }


@dataclass
class AgentResult:
    """The outcome of one invocation; ``str(result)`` is the final text.

    Attributes:
        message: the last assistant message.
        stop_reason: why the model stopped (``end_turn``, ``max_tokens``, ``interrupt``, ...).
        state: the invocation state dict passed to the invocation (the same object).
        metrics: token usage, cycles, tool calls and latency.
        interrupts: the open questions when ``stop_reason == "interrupt"``.
        output: the validated structured output (an instance of the invocation's ``output_type``), or
            None without one; ``str(result)`` is then its JSON, the text of the closing message.
        resumed: the invocation first finished a turn that was left open (a killed process, or a failure
            after a side-effecting tool ran): see ``Agent(resume_turns=...)``.
    """

    message: MessageDict
    stop_reason: str
    state: dict[str, Any]
    metrics: AgentMetrics
    interrupts: list[Interrupt] = field(default_factory=list)
    output: Any = None
    resumed: bool = False

    @property
    def text(self) -> str:
        return text_of(self.message)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class TextChunkEvent:
    """A piece of the model's text as it streams."""

    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    """The model asked for a tool call (``toolUseId``, ``name``, ``input``)."""

    tool_use: dict[str, Any]


@dataclass(frozen=True)
class ToolResultEvent:
    """A tool call finished."""

    result: ToolResultDict


@dataclass(frozen=True)
class MessageEvent:
    """A message was added to the history."""

    message: MessageDict


@dataclass(frozen=True)
class ResultEvent:
    """The invocation finished; always the last event."""

    result: AgentResult


AgentStreamEvent = (
    TextChunkEvent | ToolCallEvent | ToolProgressEvent | ToolResultEvent | MessageEvent | ResultEvent
)
