"""What Graph and Swarm runs stream, and the hook events they emit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestra.hooks import HookEvent
from orchestra.interrupts import Interrupt, InterruptException
from orchestra.multiagent._orchestrator import Orchestrator
from orchestra.multiagent.results import MultiAgentResult, NodeResult

__all__ = [
    "AfterMultiAgentInvocation",
    "AfterNodeCall",
    "BeforeMultiAgentInvocation",
    "BeforeNodeCall",
    "HandoffEvent",
    "MapItemEvent",
    "MultiAgentInitialized",
    "MultiAgentResultEvent",
    "MultiAgentStreamEvent",
    "NodeStartEvent",
    "NodeStopEvent",
    "NodeStreamEvent",
]

# -- streamed by stream_async ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeStartEvent:
    """A node started (``execution_count`` counts its executions in this run)."""

    node_id: str
    execution_count: int


@dataclass(frozen=True)
class NodeStreamEvent:
    """An event of the node's agent or nested orchestrator, tagged with the node id."""

    node_id: str
    event: Any


@dataclass(frozen=True)
class NodeStopEvent:
    """A node finished (completed, failed or interrupted)."""

    node_id: str
    result: NodeResult


@dataclass(frozen=True)
class HandoffEvent:
    """In a Swarm, one agent handed the task to another."""

    from_node: str
    to_node: str
    message: str


@dataclass(frozen=True)
class MapItemEvent:
    """An item of a map node finished (``status``: completed, failed, interrupted); ``done`` of ``count``
    items have completed so far."""

    node_id: str
    index: int
    status: str
    done: int
    count: int


@dataclass(frozen=True)
class MultiAgentResultEvent:
    """The run finished; always the last event."""

    result: MultiAgentResult


MultiAgentStreamEvent = (
    NodeStartEvent | NodeStreamEvent | NodeStopEvent | HandoffEvent | MapItemEvent | MultiAgentResultEvent
)

# -- hooks -----------------------------------------------------------------------------------------------


@dataclass
class MultiAgentInitialized(HookEvent):
    """The Graph or Swarm was built."""

    orchestrator: Orchestrator


@dataclass
class BeforeMultiAgentInvocation(HookEvent):
    """A run starts (session managers restore the saved run here, before the first invocation)."""

    orchestrator: Orchestrator
    invocation_state: dict[str, Any]


@dataclass
class AfterMultiAgentInvocation(HookEvent):
    """A run ended (completed, failed or interrupted)."""

    orchestrator: Orchestrator
    invocation_state: dict[str, Any]
    result: MultiAgentResult | None = None
    reverse_order = True


@dataclass
class BeforeNodeCall(HookEvent):
    """A node is about to run. Set ``cancel_node`` (a message) to fail it without running it, or call
    ``interrupt(name, reason)`` to stop the run until a human answers."""

    orchestrator: Orchestrator
    node_id: str
    invocation_state: dict[str, Any]
    execution_count: int = 1
    cancel_node: str | None = None
    _responses: dict[str, Any] = field(default_factory=dict, repr=False)

    def interrupt(self, name: str, reason: Any = None) -> Any:
        """Stop the run with status INTERRUPTED before this node runs; returns the answer once given."""
        interrupt_id = Interrupt.make_id(f"node:{self.node_id}:{self.execution_count}", name)
        if interrupt_id in self._responses:
            return self._responses[interrupt_id]
        raise InterruptException(Interrupt(id=interrupt_id, name=name, reason=reason))


@dataclass
class AfterNodeCall(HookEvent):
    """A node finished; ``result`` says how (session managers save here under the "node" strategy).

    With ``partial`` the node has not finished: the run saves in the middle of it (a map item completed,
    a failed attempt will be retried, a model call was charged to a budget); ``result`` is then the
    item's or attempt's, or an EXECUTING placeholder. Hooks that count nodes skip these."""

    orchestrator: Orchestrator
    node_id: str
    invocation_state: dict[str, Any]
    result: NodeResult
    partial: bool = False
    reverse_order = True
