"""Multi-agent orchestration: ``Graph`` (nodes along edges) and ``Swarm`` (agents handing off)."""

from orchestra.budget import Budget, Price
from orchestra.multiagent.base import MultiAgentBase
from orchestra.multiagent.events import (
    AfterMultiAgentInvocation,
    AfterNodeCall,
    BeforeMultiAgentInvocation,
    BeforeNodeCall,
    HandoffEvent,
    MapItemEvent,
    MultiAgentInitialized,
    MultiAgentResultEvent,
    MultiAgentStreamEvent,
    NodeStartEvent,
    NodeStopEvent,
    NodeStreamEvent,
)
from orchestra.multiagent.graph import Condition, Edge, Graph, GraphBuilder, GraphState
from orchestra.multiagent.map import Map, MapItem
from orchestra.multiagent.migrations import SavedRun
from orchestra.multiagent.nodes import NodeInput, format_input
from orchestra.multiagent.results import GraphResult, MultiAgentResult, NodeResult, Status, SwarmResult
from orchestra.multiagent.swarm import HANDOFF_TOOL, Swarm
from orchestra.retry import DEFAULT_RETRY, RetryPolicy

__all__ = [
    "DEFAULT_RETRY",
    "HANDOFF_TOOL",
    "AfterMultiAgentInvocation",
    "AfterNodeCall",
    "BeforeMultiAgentInvocation",
    "BeforeNodeCall",
    "Budget",
    "Condition",
    "Edge",
    "Graph",
    "GraphBuilder",
    "GraphResult",
    "GraphState",
    "HandoffEvent",
    "Map",
    "MapItem",
    "MapItemEvent",
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
    "Price",
    "RetryPolicy",
    "SavedRun",
    "Status",
    "Swarm",
    "SwarmResult",
    "format_input",
]
