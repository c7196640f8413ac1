"""The ``Agent``, what it returns, and what its parts see of it."""

from orchestra.agent.agent import Agent
from orchestra.agent.protocol import AgentData, AgentLike
from orchestra.agent.result import (
    AgentMetrics,
    AgentResult,
    AgentStreamEvent,
    MessageEvent,
    ResultEvent,
    TextChunkEvent,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
)
from orchestra.agent.state import AgentState, JSONState
from orchestra.agent.turn import PendingTools

__all__ = [
    "Agent",
    "AgentData",
    "AgentLike",
    "AgentMetrics",
    "AgentResult",
    "AgentState",
    "AgentStreamEvent",
    "JSONState",
    "MessageEvent",
    "PendingTools",
    "ResultEvent",
    "TextChunkEvent",
    "ToolCallEvent",
    "ToolProgressEvent",
    "ToolResultEvent",
]
