"""The local runner of a Graph: start ready nodes as anyio tasks, wait for one, apply it, save, repeat.

The decisions are ``GraphScheduler``'s (``_graph_schedule.py``); this module only drives them, the way
the Temporal workflow drives them with activities.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from orchestra.interrupts import InterruptException
from orchestra.multiagent._attempts import run_attempts
from orchestra.multiagent._graph_schedule import GraphScheduler
from orchestra.multiagent._map_run import run_map
from orchestra.multiagent.base import MultiAgentBase
from orchestra.multiagent.events import BeforeNodeCall, NodeStartEvent, NodeStopEvent
from orchestra.multiagent.nodes import Emit, NodeInput
from orchestra.multiagent.results import NodeResult, Status

__all__ = ["GraphRun"]


class GraphRun:
    """One invocation's loop: start ready nodes, wait for one to finish, apply it, save, repeat."""

    def __init__(
        self,
        graph: MultiAgentBase,
        scheduler: GraphScheduler,
        invocation_state: dict[str, Any],
        emit: Emit | None,
        responses: dict[str, Any],
        *,
        max_concurrency: int | None,
        node_timeout: float | None,
        reset_on_revisit: bool,
    ) -> None:
        self.graph = graph
        self.scheduler = scheduler
        self.invocation_state = invocation_state
        self.emit = emit
        self.responses = responses
        self.max_concurrency = max_concurrency
        self.node_timeout = node_timeout
        self.reset_on_revisit = reset_on_revisit
        self.running = 0  # nodes running in tasks
        self.metered = graph.metered()

    async def loop(self) -> None:
        graph, scheduler = self.graph, self.scheduler
        limit = self.max_concurrency or math.inf
        # Unbounded: a node's task sends its result without waiting, and the loop takes them in order.
        send, receive = anyio.create_memory_object_stream[NodeResult](math.inf)
        async with send, receive, anyio.create_task_group() as group:
            while True:
                while self.running < limit:
                    node_id = scheduler.next(graph.elapsed_ms() / 1000 if self.metered else None)
                    if node_id is None:
                        break
                    if not await self._before_node(node_id):
                        continue
                    node_input = scheduler.start(node_id, self.invocation_state)
                    if self.reset_on_revisit and node_input.execution_count > 1:
                        graph.nodes[node_id].reset()
                    if not self.running and not scheduler.ready:
                        # The only node that can run (a chain): run it here, without a task and a stream.
                        await self._settle(await self._run_node(node_id, node_input))
                        continue
                    self.running += 1
                    group.start_soon(self._execute, node_input, send)
                if not self.running:
                    break
                await self._settle(await receive.receive())
                self.running -= 1
                if scheduler.failure is not None:
                    # The nodes that finished meanwhile are recorded; those still running are cancelled
                    # (each goes back to its state before it started) and stay unfinished in the run.
                    while self.running:
                        try:
                            result = receive.receive_nowait()
                        except anyio.WouldBlock:
                            break
                        await self._settle(result)
                        self.running -= 1
                    group.cancel_scope.cancel()
                    break

    async def _before_node(self, node_id: str) -> bool:
        """Run BeforeNodeCall hooks; False when they cancelled or interrupted the node."""
        graph = self.graph
        if not graph.hooks.has_callbacks(BeforeNodeCall):
            return True
        executions = graph.document.record(node_id)["executions"]
        event = BeforeNodeCall(
            graph, node_id, self.invocation_state, executions + 1, _responses=self.responses
        )
        try:
            await graph.hooks.invoke(event)
        except InterruptException as signal:
            result = self.scheduler.interrupt_before(node_id, signal.interrupt)
            await graph.after_node(node_id, result)
            return False
        if event.cancel_node is not None:
            error = f"node {node_id!r} was cancelled by a hook: {event.cancel_node}"
            await graph.after_node(node_id, self.scheduler.cancel_before(node_id, error))
            return False
        return True

    async def _execute(self, node_input: NodeInput, send: MemoryObjectSendStream[NodeResult]) -> None:
        send.send_nowait(await self._run_node(node_input.node_id, node_input))  # never waits: unbounded

    async def _run_node(self, node_id: str, node_input: NodeInput) -> NodeResult:
        """Run one node, with its retry policy; its failure (an exception, a timeout) becomes a FAILED
        result, a budget reached an INTERRUPTED one without interrupts (the reason in ``error``)."""
        graph = self.graph
        node = graph.nodes[node_id]
        if self.emit is not None:
            await self.emit(NodeStartEvent(node_id, node_input.execution_count))
        if node.kind == "map":
            try:
                return await run_map(graph, node_id, node_input, self.emit, self.responses, self.node_timeout)
            except Exception as exc:  # the list could not be had (over= names nothing, not a list)
                error = f"{type(exc).__name__}: {exc}"
                count = node_input.execution_count
                return NodeResult(node_id=node_id, status=Status.FAILED, error=error, execution_count=count)
        return await run_attempts(
            graph,
            self.scheduler,
            node_id,
            node_input,
            lambda: node.execute(node_input, graph, self.emit, self.responses),
            self.node_timeout,
            f"node {node_id!r}",
        )

    async def _settle(self, result: NodeResult) -> None:
        self.scheduler.complete(result, self.invocation_state)
        if self.emit is not None:
            await self.emit(NodeStopEvent(result.node_id, result))
        await self.graph.after_node(result.node_id, result)
