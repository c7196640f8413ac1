"""How a Graph run is scheduled: ``GraphSchedule``, the decisions a ``Graph`` makes as its nodes finish.

They do no I/O and read no clock, so the local run loop (``_graph_run.py``) and the Temporal workflow
drive the same methods. The rules:

- Entry points start first. A node starts as soon as it is *ready*, while slower siblings still run,
  with at most ``max_concurrency`` nodes running at once.
- When a node completes, each outgoing edge's condition is evaluated: the edge *fires* or is *skipped*.
- A node with ``join="all"`` (the default) is ready when at least one incoming edge fired and no other
  incoming edge can still fire (its source is running, queued, or may still be reached). A skipped
  edge, or an edge whose source will not run, counts as resolved. With ``join="any"`` the first edge
  that fires makes it ready.
- Edges that close a loop (back edges) re-activate their target on their own. A loop must be bounded
  by ``max_node_executions`` or ``execution_timeout``.
- A node's input is the task plus the outputs of the predecessors it waited for
  (:func:`orchestra.multiagent.nodes.format_input`).
- A node that raises fails the run and cancels its running siblings; a limit ends the run as FAILED
  with a reason that names it; an interrupt ends it as INTERRUPTED once running nodes finish.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestra.agent.state import JSONState
from orchestra.interrupts import Interrupt
from orchestra.multiagent.base import MultiAgentBase
from orchestra.multiagent.nodes import NodeInput
from orchestra.multiagent.results import GraphResult, NodeResult, Status

__all__ = ["Condition", "ConditionError", "Edge", "GraphSchedule", "GraphState"]

Condition = Callable[..., bool]
_EXECUTING = Status.EXECUTING.value


class ConditionError(Exception):
    """An edge condition raised; the run fails with this message."""


def _wants_invocation_state(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "invocation_state" or p.kind is p.VAR_KEYWORD for p in parameters)


@dataclass(frozen=True)
class Edge:
    """A directed edge; ``condition(state)`` (or ``condition(state, invocation_state=...)``) decides if it fires."""

    src: str
    dst: str
    condition: Condition | None = None
    back: bool = False
    _takes_invocation_state: bool = field(default=False, compare=False, repr=False)

    def fires(self, state: GraphState, invocation_state: dict[str, Any]) -> bool:
        if self.condition is None:
            return True
        if self._takes_invocation_state:
            return bool(self.condition(state, invocation_state=invocation_state))
        return bool(self.condition(state))


class GraphState:
    """What edge conditions see: the task, node results, the shared state and the run's counters."""

    def __init__(self, graph: GraphSchedule) -> None:
        self._graph = graph

    @property
    def task(self) -> Any:
        return self._graph._fields.get("task")

    @property
    def state(self) -> JSONState:
        """The graph's shared state (read and write)."""
        return self._graph.state

    @property
    def results(self) -> dict[str, NodeResult]:
        """The latest result of every node that ran."""
        return dict(self._graph._results)

    @property
    def execution_order(self) -> list[str]:
        return list(self._graph._logs["execution_order"])

    @property
    def execution_count(self) -> int:
        return int(self._graph.run["execution_count"])

    def output(self, node_id: str) -> Any:
        """The latest output of ``node_id`` (None if it has not run)."""
        result = self._graph._results.get(node_id)
        return None if result is None else result.output

    def text(self, node_id: str) -> str:
        """The latest output of ``node_id`` as text ("" if it has not run)."""
        result = self._graph._results.get(node_id)
        return "" if result is None else result.text


class GraphSchedule(MultiAgentBase):
    """What a Graph decides as its run goes (the rules above); ``Graph`` builds it and runs it."""

    entry_points: list[str]
    edges: list[Edge]
    max_node_executions: int | None
    max_concurrency: int | None
    node_timeout: float | None
    reset_on_revisit: bool
    _out: dict[str, list[Edge]]  # each node's out-edges
    _forward_preds: dict[str, list[str]]  # each node's predecessors along forward (not back) edges
    _order: dict[str, int]  # each node's position, so ready nodes queue in declaration order

    def _blank_run(self) -> None:
        """A run's scheduling state: results, the queue, the nodes waiting on an edge."""
        super()._blank_run()
        self._results: dict[str, NodeResult] = {}
        self._queue: list[str] = []
        self._queued_seq = 0
        self._waiting: set[str] = set()
        # Per join node: (its incoming dict, the predecessors not in it yet); see _unreported_preds.
        self._unreported: dict[str, tuple[dict[str, str], set[str]]] = {}
        self.graph_state = GraphState(self)

    def _queue_node(self, node_id: str, sources: list[str]) -> None:
        self._queued_seq += 1
        self._update_node(node_id, queued=True, activation=sources, queued_seq=self._queued_seq)
        self._queue.append(node_id)
        self._waiting.discard(node_id)

    def _restore_results(self, only: Iterable[str] | None = None) -> None:
        """Rebuild the latest result of every node (or of the nodes ``only`` names) from the run document."""
        records = (
            self._node_records()
            if only is None
            else [(n, r) for n in only if (r := self._fields.get(f"node/{n}")) is not None]
        )
        self._results = {
            node_id: self._restored_result(node_id, record["result"])
            for node_id, record in records
            if record.get("result") is not None
        }

    def _restore_queue(self) -> None:
        """After a restore: nodes that were queued, running, interrupted or failed are queued again."""
        self._restore_results()
        waiting: list[tuple[int, str]] = []
        for node_id, record in self._node_records():
            status = record["status"]
            if status in (
                Status.EXECUTING.value,
                Status.INTERRUPTED.value,
                Status.FAILED.value,
            ) or record.get("queued"):
                # Running when the process stopped, or stopped for an interrupt: the same execution goes on
                # (from the node's state before it started, or where the interrupt left it).
                self._continue_execution(node_id)
                waiting.append((record.get("queued_seq", 0), node_id))
        waiting.sort()
        self._queue = [node_id for _, node_id in waiting]
        self._queued_seq = max((r.get("queued_seq", 0) for _, r in self._node_records()), default=0)
        self._waiting = {
            node_id
            for node_id, record in self._node_records()
            if not record.get("queued") and (record.get("incoming") or record.get("back"))
        }

    def _node_records(self) -> list[tuple[str, dict[str, Any]]]:
        return [(n, self._fields[f"node/{n}"]) for n in self.nodes if f"node/{n}" in self._fields]

    def _start_node(self, node_id: str, invocation_state: dict[str, Any]) -> NodeInput:
        """Mark ``node_id`` running and build its input (consumes the edges that activated it)."""
        record = self._node_record(node_id)
        sources: list[str] = record.get("activation") or []
        executions = record["executions"] + 1
        if executions > 1 and self.reset_on_revisit:
            self.nodes[node_id].reset()
        incoming: dict[str, str] = {}
        if self.nodes[node_id].join == "any":
            # The other predecessors still running belong to this activation: their edges will not start
            # the node a second time.
            incoming = {p: "absorbed" for p in self._forward_preds[node_id] if p not in sources}
        self._update_node(
            node_id,
            status=Status.EXECUTING.value,
            executions=executions,
            queued=False,
            incoming=incoming,
            back=[],
            started=True,
        )
        self._update_run(execution_count=self.run["execution_count"] + 1)
        inputs = {src: self._results[src].output for src in sources if src in self._results}
        return NodeInput(
            node_id=node_id,
            task=self._fields.get("task"),
            inputs=inputs,
            state=self.state,
            invocation_state=invocation_state,
            execution_count=executions,
        )

    def _record_result(self, result: NodeResult) -> None:
        self._results[result.node_id] = result
        self._update_node(result.node_id, status=result.status.value, result=result.model_dump(mode="json"))
        self._append_log("execution_order", result.node_id)
        self._add_usage(result.usage)
        if self.nodes[result.node_id].kind == "agent":
            self._mark_agent(result.node_id)

    def _complete_node(self, result: NodeResult, invocation_state: dict[str, Any]) -> None:
        """Record a completed node, fire or skip its outgoing edges, and queue what became ready."""
        self._record_result(result)
        self._apply_edges(result.node_id, self._evaluate_edges(result.node_id, invocation_state))

    def _evaluate_edges(self, node_id: str, invocation_state: dict[str, Any]) -> dict[str, bool]:
        """Whether each outgoing edge of ``node_id`` fires, by target (its result must be recorded first)."""
        fired: dict[str, bool] = {}
        for edge in self._out[node_id]:
            try:
                fired[edge.dst] = edge.fires(self.graph_state, invocation_state)
            except Exception as exc:
                raise ConditionError(
                    f"the condition of edge {edge.src} -> {edge.dst} raised {type(exc).__name__}: {exc}"
                ) from exc
        return fired

    def _apply_edges(self, node_id: str, fired: dict[str, bool]) -> None:
        """Mark the outgoing edges of ``node_id`` fired or skipped, then queue what became ready.

        The decisions here do no I/O: a Temporal workflow calls it with the edges an activity evaluated.
        """
        # A node none of whose out-edges fired is a terminal of this run: its output is the run's output.
        self._update_node(
            node_id, terminal=not any(fired.get(edge.dst, False) for edge in self._out[node_id])
        )
        for edge in self._out[node_id]:
            target = self._node_record(edge.dst)
            self._waiting.add(edge.dst)
            if edge.back:
                if fired.get(edge.dst, False):
                    self._update_node(edge.dst, back=[*target.get("back", []), node_id])
            else:
                # Changed in place: copying a 1,000-way join's dict per completion made fan-ins quadratic.
                incoming = target.setdefault("incoming", {})
                # An edge absorbed by a join="any" node that already started on another edge is done.
                absorbed = incoming.get(node_id) == "absorbed"
                incoming[node_id] = "fired" if fired.get(edge.dst, False) and not absorbed else "skipped"
                self._update_node(edge.dst, incoming=incoming)
                cached = self._unreported.get(edge.dst)
                if cached is not None and cached[0] is incoming:
                    cached[1].discard(node_id)
        self._queue_ready()

    def _queue_ready(self) -> None:
        """Queue every waiting node (one with an edge fired or skipped towards it) whose join is satisfied.

        Only waiting nodes are looked at, so a completion costs the same however many nodes are done.
        """
        live_memo: dict[str, bool] = {}
        for node_id in sorted(self._waiting, key=self._order.__getitem__):
            record = self._node_record(node_id)
            if record.get("queued") or record["status"] == _EXECUTING:
                continue
            if not record.get("incoming") and not record.get("back"):
                self._waiting.discard(node_id)
                continue
            sources = self._ready_sources(node_id, record, live_memo)
            if sources is not None:
                self._queue_node(node_id, sources)
                live_memo.clear()

    def _ready_sources(self, node_id: str, record: dict[str, Any], memo: dict[str, bool]) -> list[str] | None:
        incoming: dict[str, str] = record.get("incoming", {})
        back: list[str] = record.get("back", [])
        # Checked first and from a kept set: a join waiting on many predecessors answers "not yet" from
        # the first one still running, instead of scanning all of them per completion.
        waiting = not back and self.nodes[node_id].join == "all"
        if waiting and any(self._live(p, memo) for p in self._unreported_preds(node_id, incoming)):
            return None
        fired = [src for src, outcome in incoming.items() if outcome == "fired"]
        if back:
            return [*fired, *back]
        return fired or None

    def _unreported_preds(self, node_id: str, incoming: dict[str, str]) -> set[str]:
        """The forward predecessors with no edge outcome in ``incoming`` yet (kept per incoming dict)."""
        cached = self._unreported.get(node_id)
        if cached is None or cached[0] is not incoming:
            cached = (incoming, {p for p in self._forward_preds[node_id] if p not in incoming})
            self._unreported[node_id] = cached
        return cached[1]

    def _live(self, node_id: str, memo: dict[str, bool]) -> bool:
        """Whether ``node_id`` may still complete in this run (so an edge from it may still fire)."""
        stack = [node_id]
        while stack:
            current = stack[-1]
            if current in memo:
                stack.pop()
                continue
            record = self._fields.get(f"node/{current}") or {}
            if record.get("queued") or record.get("status") == _EXECUTING or record.get("back"):
                memo[current] = True
                stack.pop()
                continue
            incoming = record.get("incoming", {})
            pending = [p for p in self._forward_preds[current] if p not in incoming]
            unknown = [p for p in pending if p not in memo]
            if unknown:
                stack.extend(unknown)
                continue
            memo[current] = any(memo[p] for p in pending)
            stack.pop()
        return memo[node_id]

    def _limit_reached(self) -> str | None:
        if self.max_node_executions is not None and self.run["execution_count"] >= self.max_node_executions:
            return f"max_node_executions limit ({self.max_node_executions}) reached"
        return None

    # -- the outcome --------------------------------------------------------------------------------------

    def _terminals(self, order: list[str]) -> list[str]:
        """The terminal nodes: those that completed and whose out-edges did not fire (or that have none),
        in the order they completed."""
        last_completion = {node_id: i for i, node_id in enumerate(order)}
        return sorted(
            (
                node_id
                for node_id, record in self._node_records()
                if record.get("terminal", not self._out[node_id])
                and node_id in self._results
                and self._results[node_id].status == Status.COMPLETED
            ),
            key=lambda node_id: last_completion.get(node_id, -1),
        )

    def _terminal_output(self, order: list[str]) -> Any:
        """The output of the terminal nodes: one terminal's output, or ``{node id: output}`` for several."""
        terminals = self._terminals(order)
        if len(terminals) == 1:
            return self._results[terminals[0]].output
        return {node_id: self._results[node_id].output for node_id in terminals} or None

    def output_source(self) -> dict[str, Any] | None:
        """Which node gave the output of the run that just completed (see ``NodeResult.output_from``)."""
        terminals = self._terminals(list(self._logs["execution_order"]))
        if len(terminals) == 1:
            return self._node_source(terminals[0])
        return {"each": {node_id: self._node_source(node_id) for node_id in terminals}} if terminals else None

    def _build_result(self) -> GraphResult:
        run = self.run
        order = list(self._logs["execution_order"])
        completed = [n for n, r in self._results.items() if r.status == Status.COMPLETED]
        status = Status(run["status"])
        return GraphResult(
            status=status,
            results=dict(self._results),
            execution_order=order,
            output=self._terminal_output(order) if status == Status.COMPLETED else None,
            reason=run["reason"],
            error=run["error"],
            interrupts=[Interrupt.model_validate(i) for i in run["interrupts"]],
            usage=run["usage"],
            execution_count=run["execution_count"],
            total_nodes=len(self.nodes),
            completed_nodes=len(completed),
            failed_nodes=sum(1 for r in self._results.values() if r.status == Status.FAILED),
        )
