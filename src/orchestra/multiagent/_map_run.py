"""The local runner of a map node: items as anyio tasks, each saved as it completes (see ``map.py``).

The bookkeeping (which items are left, how they ended, whether the join holds) is ``MapScheduler``'s;
this module runs the items, with their retries and timeouts.
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio

from orchestra import tracing
from orchestra.errors import BudgetExceededError
from orchestra.multiagent import map as maps
from orchestra.multiagent._map_schedule import MapScheduler
from orchestra.multiagent.base import MultiAgentBase
from orchestra.multiagent.events import MapItemEvent
from orchestra.multiagent.map import Map
from orchestra.multiagent.nodes import Emit, Node, NodeInput
from orchestra.multiagent.results import NodeResult, Status
from orchestra.retry import DEFAULT_RETRY, attempt_note, describe_failure, run_with_retries

__all__ = ["run_map", "run_map_item"]


async def run_map(
    orchestrator: MultiAgentBase,
    node_id: str,
    node_input: NodeInput,
    emit: Emit | None,
    responses: dict[str, Any],
    item_timeout: float | None,
) -> NodeResult:
    """Run map node ``node_id``: its items, then its result (the completed items' outputs, in order).

    A failed item is a FAILED result; a budget reached or an interrupt, an INTERRUPTED one (a budget's
    carries no interrupts and the reason in ``error``). ``item_timeout`` bounds each attempt at an item
    (the graph's ``node_timeout``)."""
    spec: Map = orchestrator.nodes[node_id].executor
    attributes = {"orchestra.node.id": node_id, "orchestra.node.kind": "map"}
    with tracing.span(f"execute_node {node_id}", attributes) as span:
        started = time.perf_counter()
        run = _MapRun(orchestrator, node_id, spec, node_input, emit, responses, item_timeout)
        result = await run.run(node_id)
        result.execution_time_ms = (time.perf_counter() - started) * 1000
        result.execution_count = node_input.execution_count
        span.set(orchestra__node__status=result.status.value)
        return result


async def run_map_item(
    orchestrator: MultiAgentBase,
    node_id: str,
    node_input: NodeInput,
    index: int,
    responses: dict[str, Any],
    item_timeout: float | None,
    key: str = "",
) -> NodeResult:
    """One attempt at item ``index`` of map node ``node_id``, or of its nested map ``key``
    (``<node>:<index>...``), its list saved in the run document: what a Temporal activity runs. Raises
    what the item raised (the retry policy decides)."""
    key = key or node_id
    spec: Map = orchestrator.nodes[node_id].executor.nested(key)
    items = MapScheduler(orchestrator.document, key).items()
    run = _MapRun(orchestrator, node_id, spec, node_input, None, responses, item_timeout)
    return await run.attempt(key, spec, items[index], index, len(items), node_input.attempt)


class _MapRun:
    def __init__(
        self,
        orchestrator: MultiAgentBase,
        node_id: str,
        spec: Map,
        node_input: NodeInput,
        emit: Emit | None,
        responses: dict[str, Any],
        timeout: float | None,
    ) -> None:
        self.orchestrator = orchestrator
        self.node_id = node_id
        self.spec = spec
        self.node_input = node_input
        self.emit = emit
        self.responses = responses
        self.timeout = timeout
        self.policy = orchestrator.nodes[node_id].retry or DEFAULT_RETRY
        self._function_node: Node | None = None  # a function template's node, made once

    async def run(self, key: str, spec: Map | None = None, items: list[Any] | None = None) -> NodeResult:
        """Run the map ``key`` (the node's, or a nested one's ``<node>:<index>``) to its result."""
        spec = spec or self.spec
        scheduler = MapScheduler(self.orchestrator.document, key)
        if scheduler.started is None:
            if items is None:
                items = maps.resolve_items(spec, self.node_id, self.node_input, self.orchestrator)
            scheduler.begin(spec, items)
            await self.orchestrator.save_progress(self.node_id)  # the list is durable before any item runs
        else:
            scheduler.begin(spec)
            items = scheduler.items()
        await self._items(scheduler, spec, items)
        nested = scheduler.result(self.node_id, spec)
        if scheduler.failure is not None:
            return NodeResult(
                node_id=self.node_id, status=Status.FAILED, error=scheduler.failure, usage=nested.usage
            )
        if scheduler.stopped is not None or scheduler.interrupts:
            return NodeResult(
                node_id=self.node_id,
                status=Status.INTERRUPTED,
                error=scheduler.stopped,
                interrupts=scheduler.interrupts,
                usage=nested.usage,
            )
        return nested

    async def _items(self, scheduler: MapScheduler, spec: Map, items: list[Any]) -> None:
        if scheduler.joined:
            return
        limit = spec.max_concurrency or math.inf
        running = 0
        send, receive = anyio.create_memory_object_stream[tuple[int, dict[str, Any]]](math.inf)
        # The streams outlive the task group: an item finishing as the others are cancelled still sends.
        async with send, receive, anyio.create_task_group() as group:
            while True:
                while running < limit and (index := scheduler.take()) is not None:
                    group.start_soon(self._item, scheduler, spec, items, index, send)
                    running += 1
                if not running:
                    break
                finished = [await receive.receive()]
                while True:  # items that finished meanwhile share the next save
                    try:
                        finished.append(receive.receive_nowait())
                    except anyio.WouldBlock:
                        break
                running -= len(finished)
                for index, record in finished:
                    scheduler.settle(index, record)
                await self.orchestrator.save_progress(self.node_id)
                if self.emit is not None:
                    for index, record in finished:
                        event = MapItemEvent(
                            self.node_id, index, record["status"], len(scheduler.done), scheduler.count
                        )
                        await self.emit(event)
                if scheduler.failure is not None or scheduler.joined:
                    group.cancel_scope.cancel()  # the items still running are not needed
                    break

    async def _item(
        self, scheduler: MapScheduler, spec: Map, items: list[Any], index: int, send: Any
    ) -> None:
        """One item, with its retries; sends its record (``status``: completed, failed, interrupted, or
        stopped). The buffer is unbounded: sending never waits."""
        item = items[index]
        previous = scheduler.item(index) or {}
        # A resumed item goes on with its attempts; one that failed or stopped starts a new round.
        attempts: list[dict[str, Any]] = (
            list(previous.get("attempts") or []) if previous.get("status") == "retrying" else []
        )
        what = f"item {index} of {self.node_id!r}"

        async def failed(attempt: int, error: BaseException, wait: float) -> None:
            attempts.append(
                {
                    "attempt": attempt,
                    "error": _describe(error, self.timeout, what),
                    "retry_in": round(wait, 3),
                }
            )
            scheduler.retrying(index, attempts)
            await self.orchestrator.save_progress(self.node_id)

        started = time.perf_counter()
        try:
            result = await run_with_retries(
                self.policy,
                len(attempts) + 1,
                lambda attempt: self.attempt(scheduler.key, spec, item, index, scheduler.count, attempt),
                failed,
            )
        except BudgetExceededError as exc:
            record: dict[str, Any] = {"status": "stopped", "error": str(exc)}
        except Exception as exc:
            error = _describe(exc, self.timeout, what) + attempt_note(len(attempts) + 1, self.policy)
            record = {"status": "failed", "error": error, "attempts": attempts}
        else:
            record = MapScheduler.item_record(result, (time.perf_counter() - started) * 1000, attempts)
        send.send_nowait((index, record))

    async def attempt(
        self, key: str, spec: Map, item: Any, index: int, count: int, attempt: int
    ) -> NodeResult:
        """One attempt at one item: raises what the item raised (the retry policy decides)."""
        source = self.node_input
        if spec.template_kind == "map":
            nested: Map = spec.node
            if not isinstance(item, list):
                raise TypeError(f"item {index} is a {type(item).__name__}; a nested map needs a list")
            result = await self.run(f"{key}:{index}", nested, item)
            if result.status == Status.FAILED:
                raise _NestedFailure(result.error or "a nested item failed")
            return result
        if spec.template_kind == "function":  # it holds no state: every item runs the same node
            node = self._function_node = self._function_node or Node(self.node_id, spec.node)
            executor = node.executor
        else:
            executor = spec.item_executor()
            node = Node(self.node_id, executor)
        if node.kind == "orchestrator":
            executor.scope_id = f"{self.orchestrator.scope_id}.{self.node_id}.{key.replace(':', '.')}.{index}"
            manager = self.orchestrator.session_manager
            if manager is not None:
                executor.set_session_manager(manager)
        self.orchestrator.count_spending(executor, self.node_id)
        prompted = node.kind in ("agent", "orchestrator")
        node_input = NodeInput(
            node_id=self.node_id,
            task=maps.item_prompt(source.task, item, index, count) if prompted else source.task,
            inputs={},
            state=source.state,
            invocation_state=source.invocation_state,
            execution_count=source.execution_count,
            attempt=attempt,
            item=item,
            index=index,
        )
        if self.timeout is None:
            result = await node.execute(node_input, self.orchestrator, self.emit, self.responses)
        else:
            with anyio.fail_after(self.timeout):
                result = await node.execute(node_input, self.orchestrator, self.emit, self.responses)
        if result.status == Status.FAILED:  # a nested graph's failure: its reason is the item's error
            raise _NestedFailure(result.error or "the item's run failed")
        if result.status == Status.INTERRUPTED and not result.interrupts and result.error:
            raise BudgetExceededError(result.error, limit="", allowed=0, spent=0, scope="a nested run")
        return result


class _NestedFailure(Exception):
    """A nested map or graph item failed; its error is already described."""


def _describe(error: BaseException, node_timeout: float | None, what: str) -> str:
    if isinstance(error, _NestedFailure):
        return str(error)
    return describe_failure(error, node_timeout, what)
