"""The local run loop of a Graph: start ready nodes as anyio tasks, wait for one, decide, save, repeat.

The decisions are ``GraphSchedule``'s I/O-free methods (see _schedule.py); this module only drives them, the way
the Temporal workflow drives them with activities.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from orchestra.interrupts import Interrupt, InterruptException
from orchestra.multiagent import map as maps
from orchestra.multiagent._map_run import run_map
from orchestra.multiagent._schedule import ConditionError, GraphSchedule
from orchestra.multiagent.events import AfterNodeCall, BeforeNodeCall, NodeStartEvent, NodeStopEvent
from orchestra.multiagent.nodes import Emit, NodeInput
from orchestra.multiagent.results import GraphResult, NodeResult, Status

__all__ = ["GraphRun"]


class GraphRun:
    """One invocation's loop: start ready nodes, wait for one to finish, decide, save, repeat."""

    def __init__(
        self,
        graph: GraphSchedule,
        invocation_state: dict[str, Any],
        emit: Emit | None,
        responses: dict[str, Any],
    ) -> None:
        self.graph = graph
        self.invocation_state = invocation_state
        self.emit = emit
        self.responses = responses
        self.running: dict[str, anyio.CancelScope] = {}
        self.failure: tuple[str, str | None] | None = None  # (reason, error)
        self.interrupts: list[Interrupt] = []
        self.stopped: str | None = None  # a budget was reached: the run stops, resumable

    def fail(self, reason: str, error: str | None = None) -> None:
        if self.failure is None:
            self.failure = (reason, error)

    def stop(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason

    def _may_start(self) -> bool:
        return self.failure is None and not self.interrupts and self.stopped is None

    async def loop(self) -> None:
        graph = self.graph
        limit = graph.max_concurrency or math.inf
        send, receive = anyio.create_memory_object_stream[tuple[str, NodeResult | None]](math.inf)
        async with anyio.create_task_group() as group, send, receive:
            while True:
                while graph._queue and len(self.running) < limit and self._may_start():
                    node_id = graph._queue[0]
                    reason = graph._limit_reached()
                    if reason:
                        self.fail(f"{reason} before node {node_id!r} could run")
                        break
                    spent = graph._budget_stop(node_id)
                    if spent is not None:
                        self.stop(str(spent))
                        break
                    graph._queue.pop(0)
                    if not await self._before_node(node_id):
                        continue
                    node_input = graph._start_node(node_id, self.invocation_state)
                    if not self.running and not graph._queue:
                        # The only node that can run (a chain): run it here, without a task and a stream.
                        await self._settle(await self._run_node(node_id, node_input))
                        continue
                    scope = anyio.CancelScope()
                    self.running[node_id] = scope
                    group.start_soon(self._execute, node_id, node_input, scope, send.clone())
                if not self.running:
                    break
                node_id, result = await receive.receive()
                del self.running[node_id]
                if result is not None:
                    await self._settle(result)
                if self.failure is not None:
                    for scope in self.running.values():
                        scope.cancel()

    async def _before_node(self, node_id: str) -> bool:
        """Run BeforeNodeCall hooks; False when they cancelled or interrupted the node."""
        graph = self.graph
        record = graph._node_record(node_id)
        event = BeforeNodeCall(
            graph, node_id, self.invocation_state, record["executions"] + 1, _responses=self.responses
        )
        try:
            await graph.hooks.invoke(event)
        except InterruptException as signal:
            result = NodeResult(node_id=node_id, status=Status.INTERRUPTED, interrupts=[signal.interrupt])
            graph._update_node(
                node_id,
                queued=True,
                started=False,
                status=Status.INTERRUPTED.value,
                result=result.model_dump(mode="json"),
            )
            graph._results[node_id] = result
            self.interrupts.append(signal.interrupt)
            await graph._after_node(AfterNodeCall(graph, node_id, self.invocation_state, result))
            return False
        if event.cancel_node is not None:
            error = f"node {node_id!r} was cancelled by a hook: {event.cancel_node}"
            result = NodeResult(node_id=node_id, status=Status.FAILED, error=error)
            graph._update_node(node_id, queued=True)
            graph._record_result(result)
            self.fail(error, error)
            await graph._after_node(AfterNodeCall(graph, node_id, self.invocation_state, result))
            return False
        return True

    async def _execute(
        self,
        node_id: str,
        node_input: NodeInput,
        scope: anyio.CancelScope,
        send: MemoryObjectSendStream[tuple[str, NodeResult | None]],
    ) -> None:
        result: NodeResult | None = None
        async with send:
            with scope:
                result = await self._run_node(node_id, node_input)
            await send.send((node_id, None if scope.cancelled_caught else result))

    async def _run_node(self, node_id: str, node_input: NodeInput) -> NodeResult:
        """Run one node, with its retry policy; its failure (an exception, a timeout) becomes a FAILED
        result, a budget reached an INTERRUPTED one without interrupts (the reason in ``error``)."""
        graph = self.graph
        node = graph.nodes[node_id]
        if self.emit is not None:
            await self.emit(NodeStartEvent(node_id, node_input.execution_count))
        if node.kind == "map":
            try:
                result = await run_map(
                    graph, node_id, node_input, self.emit, self.responses, graph.node_timeout
                )
            except Exception as exc:  # the list could not be had (over= names nothing, not a list)
                result = NodeResult(
                    node_id=node_id, status=Status.FAILED, error=f"{type(exc).__name__}: {exc}"
                )
            result.execution_count = node_input.execution_count
            return result
        result = await graph._node_attempts(
            node_id,
            node_input,
            lambda: node.execute(node_input, graph, self.emit, self.responses),
            graph.node_timeout,
            f"node {node_id!r}",
        )
        result.execution_count = node_input.execution_count
        return result

    async def _settle(self, result: NodeResult) -> None:
        graph = self.graph
        node_id = result.node_id
        if result.status == Status.COMPLETED:
            if graph.nodes[node_id].kind == "map":
                maps.clear(graph, node_id)  # its items are in its output now; gone in the same save
            try:
                graph._complete_node(result, self.invocation_state)
            except ConditionError as exc:
                self.fail(str(exc), str(exc))
        else:
            graph._record_result(result)
            if result.status == Status.INTERRUPTED:
                if result.interrupts:
                    self.interrupts.extend(result.interrupts)
                else:  # a budget was reached (here, or in a nested run or a map's items)
                    self.stop(result.error or "BudgetExceeded")
            else:
                self.fail(f"node {node_id!r} failed: {result.error}", result.error)
        if self.emit is not None:
            await self.emit(NodeStopEvent(node_id, result))
        await graph._after_node(AfterNodeCall(graph, node_id, self.invocation_state, result))

    def finish(self) -> GraphResult:
        self.graph._conclude(self.failure, self.interrupts, self.stopped)
        return self.graph._build_result()
