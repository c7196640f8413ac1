"""The local runner of a map node: items as anyio tasks, each saved as it completes (see ``map.py``)."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from orchestra import tracing
from orchestra.errors import BudgetExceededError
from orchestra.interrupts import Interrupt
from orchestra.messages import Usage
from orchestra.multiagent import map as maps
from orchestra.multiagent.base import MultiAgentBase
from orchestra.multiagent.events import MapItemEvent
from orchestra.multiagent.map import Map
from orchestra.multiagent.nodes import Emit, Node, NodeInput
from orchestra.multiagent.results import NodeResult, Status, output_json
from orchestra.retry import DEFAULT_RETRY, attempt_note, describe_failure, run_with_retries

if TYPE_CHECKING:
    from orchestra.multiagent.map import Map

__all__ = ["finish_result", "item_record", "run_item_attempt", "run_map"]


@dataclass
class _Outcome:
    """How the items of one map ended (for the node's result)."""

    failure: str | None = None
    stopped: str | None = None
    interrupts: list[Interrupt] = field(default_factory=list)


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


async def run_item_attempt(
    orchestrator: MultiAgentBase,
    node_id: str,
    node_input: NodeInput,
    index: int,
    responses: dict[str, Any],
    item_timeout: float | None,
) -> NodeResult:
    """One attempt at item ``index`` of map node ``node_id`` (its list saved in the run document): what
    a Temporal activity runs. Raises what the item raised (the retry policy decides)."""
    spec: Map = orchestrator.nodes[node_id].executor
    items = orchestrator._fields[maps.items_name(node_id)]
    run = _MapRun(orchestrator, node_id, spec, node_input, None, responses, item_timeout)
    return await run._attempt(node_id, spec, items[index], index, len(items), node_input.attempt)


def item_record(result: NodeResult, elapsed_ms: float, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """An item's saved record from its result (``status``, ``output`` as JSON, ``usage``, its failed
    attempts); ``Map.restore_output`` makes a structured output its model again."""
    record: dict[str, Any] = {
        "status": result.status.value,
        "output": output_json(result.output),
        "usage": result.usage.model_dump(by_alias=True),
        "execution_time_ms": elapsed_ms,
    }
    if attempts:
        record["attempts"] = attempts
    if result.interrupts:
        record["interrupts"] = [i.model_dump(mode="json") for i in result.interrupts]
    if result.status == Status.FAILED:
        record["error"] = result.error
    return record


def finish_result(
    orchestrator: MultiAgentBase, node_id: str, key: str | None = None, spec: Map | None = None
) -> NodeResult:
    """A map node's result from its items' saved results: the completed items' outputs, in item order
    (``key`` and ``spec``: a nested map's, whose result is its outer item's output)."""
    key = key or node_id
    spec = spec or orchestrator.nodes[node_id].executor
    count = maps.started(orchestrator, key) or 0
    records = [maps.item_record(orchestrator, key, i) or {} for i in maps.completed(orchestrator, key, count)]
    usage = Usage()
    for record in records:
        usage = usage + Usage.model_validate(record.get("usage") or {})
    return NodeResult(
        node_id=node_id,
        status=Status.COMPLETED,
        output=spec.restore_output([record.get("output") for record in records]),
        usage=usage,
    )


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

    async def run(self, key: str, spec: Map | None = None, items: list[Any] | None = None) -> NodeResult:
        """Run the map ``key`` (the node's, or a nested one's ``<node>:<index>``) to its result."""
        spec = spec or self.spec
        doc = self.orchestrator
        count = maps.started(doc, key)
        if count is None:
            if items is None:
                items = maps.resolve_items(spec, self.node_id, self.node_input, doc)
            count = maps.begin(doc, key, items)
            await doc._save_progress(self.node_id)  # the list is durable before any item runs
        else:
            items = doc._fields[maps.items_name(key)]
        assert items is not None
        outcome = await self._items(key, spec, items, count)
        nested = finish_result(doc, self.node_id, key, spec)
        if outcome.failure is not None:
            return NodeResult(
                node_id=self.node_id, status=Status.FAILED, error=outcome.failure, usage=nested.usage
            )
        if outcome.stopped is not None or outcome.interrupts:
            return NodeResult(
                node_id=self.node_id,
                status=Status.INTERRUPTED,
                error=outcome.stopped,
                interrupts=outcome.interrupts,
                usage=nested.usage,
            )
        return nested

    async def _items(self, key: str, spec: Map, items: list[Any], count: int) -> _Outcome:
        doc = self.orchestrator
        outcome = _Outcome()
        done = [
            maps.MapItem(i, items[i], spec.restore_item((maps.item_record(doc, key, i) or {}).get("output")))
            for i in maps.completed(doc, key, count)
        ]
        queue = deque(maps.pending(doc, key, count))
        if spec.satisfied(done, count):
            return outcome
        limit = spec.max_concurrency or math.inf
        running = 0
        send, receive = anyio.create_memory_object_stream[tuple[int, dict[str, Any]]](math.inf)
        # The streams outlive the task group: an item finishing as the others are cancelled still sends.
        async with send, receive, anyio.create_task_group() as group:
            while True:
                while queue and running < limit and not _stopping(outcome):
                    group.start_soon(self._item, key, spec, items, queue.popleft(), count, send)
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
                    self._settle(key, index, record, outcome)
                    if record["status"] == "completed":
                        done.append(
                            maps.MapItem(index, items[index], spec.restore_item(record.get("output")))
                        )
                await doc._save_progress(self.node_id)
                if self.emit is not None:
                    for index, record in finished:
                        await self.emit(MapItemEvent(self.node_id, index, record["status"], len(done), count))
                if outcome.failure is not None or spec.satisfied(done, count):
                    group.cancel_scope.cancel()  # the items still running are not needed
                    break
        return outcome

    def _settle(self, key: str, index: int, record: dict[str, Any], outcome: _Outcome) -> None:
        status = record["status"]
        if status == "stopped":  # a budget was reached: the item runs again on resume
            outcome.stopped = outcome.stopped or record.get("error")
            return
        maps.record_item(self.orchestrator, key, index, record)
        if status == "failed" and outcome.failure is None:
            outcome.failure = f"item {index} failed: {record.get('error')}"
        elif status == "interrupted":
            outcome.interrupts.extend(Interrupt.model_validate(i) for i in record.get("interrupts") or [])

    async def _item(self, key: str, spec: Map, items: list[Any], index: int, count: int, send: Any) -> None:
        record = await self._run_item(key, spec, items[index], index, count)
        send.send_nowait((index, record))  # the buffer is unbounded: this never waits

    async def _run_item(self, key: str, spec: Map, item: Any, index: int, count: int) -> dict[str, Any]:
        """One item, with its retries: its record (``status``: completed, failed, interrupted, stopped)."""
        doc = self.orchestrator
        previous = maps.item_record(doc, key, index) or {}
        # A resumed item goes on with its attempts; one that failed or stopped starts a new round.
        attempts: list[dict[str, Any]] = (
            list(previous.get("attempts") or []) if previous.get("status") == "retrying" else []
        )

        async def failed(attempt: int, error: BaseException, wait: float) -> None:
            described = _describe(error, self.timeout, f"item {index} of {self.node_id!r}")
            attempts.append({"attempt": attempt, "error": described, "retry_in": round(wait, 3)})
            maps.record_item(doc, key, index, {"status": "retrying", "attempts": list(attempts)})
            await doc._save_progress(self.node_id)

        started = time.perf_counter()
        try:
            result = await run_with_retries(
                self.policy,
                len(attempts) + 1,
                lambda attempt: self._attempt(key, spec, item, index, count, attempt),
                failed,
            )
        except BudgetExceededError as exc:
            return {"status": "stopped", "error": str(exc)}
        except Exception as exc:
            error = _describe(exc, self.timeout, f"item {index} of {self.node_id!r}") + attempt_note(
                len(attempts) + 1, self.policy
            )
            return {"status": "failed", "error": error, "attempts": attempts}
        return item_record(result, (time.perf_counter() - started) * 1000, attempts)

    async def _attempt(
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
        executor = spec.item_executor()
        node = Node(self.node_id, executor)
        if node.kind == "orchestrator":
            executor.scope_id = f"{self.orchestrator.scope_id}.{self.node_id}.{key.replace(':', '.')}.{index}"
            manager = self.orchestrator.session_manager
            if manager is not None:
                executor.set_session_manager(manager)
        meter = self.orchestrator._meter
        if meter is not None:
            meter.attach(executor, self.node_id)
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


def _stopping(outcome: _Outcome) -> bool:
    return outcome.failure is not None or outcome.stopped is not None
