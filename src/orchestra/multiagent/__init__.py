"""Multi-agent orchestration: ``Graph`` (nodes along edges) and ``Swarm`` (agents handing off).

What the other packages use of a run: ``RunDocument`` (``orchestrator.document``: read and change a run,
take its changes, dump and load it), the I/O-free schedulers (``GraphScheduler``, ``SwarmScheduler``,
``MapScheduler``: what an execution backend drives), and the ``Orchestrator`` protocol.
"""

from orchestra.budget import Budget, Price
from orchestra.multiagent._graph_schedule import GraphScheduler
from orchestra.multiagent._graph_shape import ConditionError
from orchestra.multiagent._map_run import run_map_item
from orchestra.multiagent._map_schedule import MapScheduler
from orchestra.multiagent._metering import SpendingCounter
from orchestra.multiagent._orchestrator import Orchestrator, RunOptions
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent._swarm_schedule import SwarmScheduler
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
    "ConditionError",
    "Edge",
    "Graph",
    "GraphBuilder",
    "GraphResult",
    "GraphScheduler",
    "GraphState",
    "HandoffEvent",
    "Map",
    "MapItem",
    "MapItemEvent",
    "MapScheduler",
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
    "Orchestrator",
    "Price",
    "RetryPolicy",
    "RunDocument",
    "RunOptions",
    "SavedRun",
    "SpendingCounter",
    "Status",
    "Swarm",
    "SwarmResult",
    "SwarmScheduler",
    "format_input",
    "run_map_item",
]
