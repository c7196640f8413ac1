"""The ``Agent`` and what it returns."""

from orchestra.agent.agent import Agent, AgentData
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

__all__ = [
    "Agent",
    "AgentData",
    "AgentMetrics",
    "AgentResult",
    "AgentState",
    "AgentStreamEvent",
    "JSONState",
    "MessageEvent",
    "ResultEvent",
    "TextChunkEvent",
    "ToolCallEvent",
    "ToolProgressEvent",
    "ToolResultEvent",
]
