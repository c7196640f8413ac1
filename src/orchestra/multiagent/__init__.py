"""Multi-agent orchestration: ``Graph`` (nodes along edges) and ``Swarm`` (agents handing off)."""

from orchestra.multiagent.base import MultiAgentBase
from orchestra.multiagent.events import (
    AfterMultiAgentInvocation,
    AfterNodeCall,
    BeforeMultiAgentInvocation,
    BeforeNodeCall,
    HandoffEvent,
    MultiAgentInitialized,
    MultiAgentResultEvent,
    MultiAgentStreamEvent,
    NodeStartEvent,
    NodeStopEvent,
    NodeStreamEvent,
)
from orchestra.multiagent.graph import Condition, Edge, Graph, GraphBuilder, GraphState
from orchestra.multiagent.nodes import NodeInput, format_input
from orchestra.multiagent.results import GraphResult, MultiAgentResult, NodeResult, Status, SwarmResult
from orchestra.multiagent.swarm import HANDOFF_TOOL, Swarm

__all__ = [
    "HANDOFF_TOOL",
    "AfterMultiAgentInvocation",
    "AfterNodeCall",
    "BeforeMultiAgentInvocation",
    "BeforeNodeCall",
    "Condition",
    "Edge",
    "Graph",
    "GraphBuilder",
    "GraphResult",
    "GraphState",
    "HandoffEvent",
    "MultiAgentBase",
    "MultiAgentInitialized",
    "MultiAgentResult",
    "MultiAgentResultEvent",
    "MultiAgentStreamEvent",
    "NodeInput",
    "NodeResult",
    "NodeStartEvent",
    "NodeStopEvent",
    "NodeStreamEvent",
    "Status",
    "Swarm",
    "SwarmResult",
    "format_input",
]
