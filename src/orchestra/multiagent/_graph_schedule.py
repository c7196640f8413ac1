"""How a Graph run is scheduled: ``GraphScheduler``, the decisions a graph makes as its nodes finish.

It does no I/O, reads no clock and owns no task: given the graph's shape and the run document it says
which node runs next, and given a completion it applies it. The local runner (``_graph_run.py``) and
the Temporal workflow drive it through the same methods. The rules:

- Entry points start first. A node starts as soon as it is *ready*, while slower siblings still run,
  with at most ``max_concurrency`` nodes running at once (the runner's limit).
- When a node completes, each outgoing edge's condition is evaluated: the edge *fires* or is *skipped*.
- A node with ``join="all"`` (the default) is ready when at least one incoming edge fired and no other
  incoming edge can still fire (its source is running, queued, or may still be reached). A skipped
  edge, or an edge whose source will not run, counts as resolved. With ``join="any"`` the first edge
  that fires makes it ready.
- Edges that close a loop (back edges) re-activate their target on their own. A loop must be bounded
  by ``max_node_executions`` or ``execution_timeout``.
- A node's input is the task plus the outputs of the predecessors it waited for
  (:func:`orchestra.multiagent.nodes.format_input`).
- A node that raises fails the run (the runner cancels its running siblings); a limit ends the run as
  FAILED with a reason that names it; an interrupt ends it as INTERRUPTED once running nodes finish; a
  budget reached stops it, resumable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestra.budget import Budget
from orchestra.interrupts import Interrupt
from orchestra.multiagent._graph_shape import ConditionError, GraphShape, GraphState
from orchestra.multiagent._map_schedule import MapScheduler
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent._scheduler import Scheduler
from orchestra.multiagent.nodes import Node, NodeInput
from orchestra.multiagent.results import GraphResult, NodeResult, Status

__all__ = ["GraphScheduler", "graph_output_source", "graph_result"]

_EXECUTING = Status.EXECUTING.value


class GraphScheduler(Scheduler):
    """One invocation's decisions for a Graph (the rules above), on its run document.

    A runner calls ``begin``, then repeatedly ``next`` (the node to start, or None) and ``start`` (its
    input), runs the node, and hands its result to ``complete``; ``finish`` records how the run ended.
    """

    def __init__(
        self,
        shape: GraphShape,
        document: RunDocument,
        nodes: Mapping[str, Node],
        *,
        max_node_executions: int | None = None,
        budget: Budget | None = None,
        what: str = "graph",
    ) -> None:
        super().__init__(document, nodes, budget, what)
        self.shape = shape
        self.max_node_executions = max_node_executions
        self.state = GraphState(document)
        self._queue: list[str] = []
        self._queued_seq = 0
        self._waiting: set[str] = set()
        # Per join node: (its incoming dict, the predecessors not in it yet); see _unreported_preds.
        self._unreported: dict[str, tuple[dict[str, str], set[str]]] = {}

    @property
    def ready(self) -> Sequence[str]:
        """The nodes queued to start, in order."""
        return self._queue

    def begin(self) -> None:
        """Take the run where the document left it: nodes that were queued, running, interrupted or
        failed are queued again; a run with no node record yet queues its entry points."""
        fresh = next(self.document.records(), None) is None
        self._restore_queue()
        if fresh:
            for entry in self.shape.entry_points:
                self._queue_node(entry, [])

    def next(self, elapsed_s: float | None = None) -> str | None:
        """The next node to start, taken off the queue; None when none may start (nothing is ready, or
        the run failed, stopped or waits on interrupts). A limit reached fails the run and a budget spent
        (checked when ``elapsed_s``, the run's time so far, is given) stops it: None then too."""
        if not self._queue or not self.may_start:
            return None
        node_id = self._queue[0]
        reason = self.limit_reached()
        if reason:
            self.fail(f"{reason} before node {node_id!r} could run")
            return None
        if elapsed_s is not None:
            spent = self.budget_stop(node_id, elapsed_s)
            if spent is not None:
                self.stop(str(spent))
                return None
        self._queue.pop(0)
        return node_id

    def start(self, node_id: str, invocation_state: dict[str, Any]) -> NodeInput:
        """Mark ``node_id`` running and build its input (consumes the edges that activated it)."""
        document = self.document
        record = document.record(node_id)
        sources: list[str] = record.get("activation") or []
        executions = record["executions"] + 1
        incoming: dict[str, str] = {}
        if self.nodes[node_id].join == "any":
            # The other predecessors still running belong to this activation: their edges will not start
            # the node a second time.
            incoming = {p: "absorbed" for p in self.shape.forward_preds[node_id] if p not in sources}
        document.update_node(
            node_id,
            status=_EXECUTING,
            executions=executions,
            queued=False,
            incoming=incoming,
            back=[],
            started=True,
        )
        document.update_run(execution_count=document.run["execution_count"] + 1)
        inputs = {}
        for source in sources:
            result = document.result(source)
            if result is not None:
                inputs[source] = result.output
        return NodeInput(
            node_id=node_id,
            task=document.field("task"),
            inputs=inputs,
            state=document.state,
            invocation_state=invocation_state,
            execution_count=executions,
        )

    def interrupt_before(self, node_id: str, interrupt: Interrupt) -> NodeResult:
        """A hook interrupted the node before it ran: it waits, queued, for the answer."""
        result = NodeResult(node_id=node_id, status=Status.INTERRUPTED, interrupts=[interrupt])
        self.document.set_result(node_id, result, queued=True, started=False)
        self.interrupts.append(interrupt)
        return result

    def cancel_before(self, node_id: str, error: str) -> NodeResult:
        """A hook cancelled the node before it ran: it fails, and so does the run."""
        result = NodeResult(node_id=node_id, status=Status.FAILED, error=error)
        self.document.update_node(node_id, queued=True)
        self.record(result)
        self.fail(error, error)
        return result

    def complete(
        self, result: NodeResult, invocation_state: dict[str, Any], fired: dict[str, bool] | None = None
    ) -> None:
        """Apply a node's execution: record its result; if it completed, fire or skip its out-edges (by
        their conditions, or as ``fired`` says when they were evaluated where the node ran) and queue what
        became ready; if it failed, fail the run; if it was interrupted, the run waits (a budget's
        interruption, without interrupts, stops it)."""
        node_id = result.node_id
        if result.status == Status.COMPLETED:
            if self.nodes[node_id].kind == "map":
                MapScheduler(self.document, node_id).clear()  # its items are in its output now
            self.record(result)
            if fired is None:
                try:
                    fired = self.evaluate_edges(node_id, invocation_state)
                except ConditionError as exc:
                    self.fail(str(exc), str(exc))
                    return
            self.apply_edges(node_id, fired)
            return
        self.record(result)
        if result.status == Status.INTERRUPTED:
            if result.interrupts:
                self.interrupts.extend(result.interrupts)
            else:  # a budget was reached (here, or in a nested run or a map's items)
                self.stop(result.error or "BudgetExceeded")
        else:
            self.fail(f"node {node_id!r} failed: {result.error}", result.error)

    def record(self, result: NodeResult) -> None:
        """Record a finished execution: its result, the execution order, the run's tokens, its agent."""
        node_id = result.node_id
        document = self.document
        document.set_result(node_id, result)
        document.append("execution_order", node_id)
        document.add_usage(result.usage)
        if self.nodes[node_id].kind == "agent":
            document.mark_agent(node_id)

    def evaluate_edges(self, node_id: str, invocation_state: dict[str, Any]) -> dict[str, bool]:
        """Whether each outgoing edge of ``node_id`` fires, by target (its result must be recorded first).

        Raises:
            ConditionError: a condition raised.
        """
        fired: dict[str, bool] = {}
        for edge in self.shape.out[node_id]:
            try:
                fired[edge.dst] = edge.fires(self.state, invocation_state)
            except Exception as exc:
                raise ConditionError(
                    f"the condition of edge {edge.src} -> {edge.dst} raised {type(exc).__name__}: {exc}"
                ) from exc
        return fired

    def apply_edges(self, node_id: str, fired: dict[str, bool]) -> None:
        """Mark the outgoing edges of ``node_id`` fired or skipped, then queue what became ready."""
        document = self.document
        waiting = self._waiting
        terminal = True
        for edge in self.shape.out[node_id]:
            dst = edge.dst
            fires = fired.get(dst, False)
            terminal = terminal and not fires
            target = document.record(dst)
            waiting.add(dst)
            if edge.back:
                if fires:
                    document.update_node(dst, back=[*target.get("back", []), node_id])
            else:
                # Changed in place: copying a 1,000-way join's dict per completion made fan-ins quadratic.
                incoming = target.setdefault("incoming", {})
                # An edge absorbed by a join="any" node that already started on another edge is done.
                absorbed = incoming.get(node_id) == "absorbed"
                incoming[node_id] = "fired" if fires and not absorbed else "skipped"
                document.update_node(dst, incoming=incoming)
                cached = self._unreported.get(dst)
                if cached is not None and cached[0] is incoming:
                    cached[1].discard(node_id)
        # A node none of whose out-edges fired is a terminal of this run: its output is the run's output.
        document.update_node(node_id, terminal=terminal)
        self._queue_ready()

    def limit_reached(self) -> str | None:
        """Why no node may start any more (``max_node_executions``), or None."""
        if (
            self.max_node_executions is not None
            and self.document.run["execution_count"] >= self.max_node_executions
        ):
            return f"max_node_executions limit ({self.max_node_executions}) reached"
        return None

    # -- the queue ----------------------------------------------------------------------------------------

    def _queue_node(self, node_id: str, sources: list[str]) -> None:
        self._queued_seq += 1
        self.document.update_node(node_id, queued=True, activation=sources, queued_seq=self._queued_seq)
        self._queue.append(node_id)
        self._waiting.discard(node_id)

    def _restore_queue(self) -> None:
        """Nodes that were queued, running, interrupted or failed are queued again, in the order they
        were first queued."""
        waiting: list[tuple[int, str]] = []
        records = list(self.document.records())
        for node_id, record in records:
            status = record["status"]
            if status in (_EXECUTING, Status.INTERRUPTED.value, Status.FAILED.value) or record.get("queued"):
                # Running when the process stopped, or stopped for an interrupt: the same execution goes on
                # (from the node's state before it started, or where the interrupt left it).
                self.continue_execution(node_id)
                waiting.append((record.get("queued_seq", 0), node_id))
        waiting.sort()
        self._queue = [node_id for _, node_id in waiting]
        self._queued_seq = max((r.get("queued_seq", 0) for _, r in records), default=0)
        self._waiting = {
            node_id
            for node_id, record in records
            if not record.get("queued") and (record.get("incoming") or record.get("back"))
        }

    def _queue_ready(self) -> None:
        """Queue every waiting node (one with an edge fired or skipped towards it) whose join is satisfied.

        Only waiting nodes are looked at, so a completion costs the same however many nodes are done.
        """
        live_memo: dict[str, bool] = {}
        waiting = self._waiting
        ordered = sorted(waiting, key=self.shape.order.__getitem__) if len(waiting) > 1 else list(waiting)
        for node_id in ordered:
            record = self.document.record(node_id)
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
            preds = self.shape.forward_preds[node_id]
            cached = (incoming, {p for p in preds if p not in incoming})
            self._unreported[node_id] = cached
        return cached[1]

    def _live(self, node_id: str, memo: dict[str, bool]) -> bool:
        """Whether ``node_id`` may still complete in this run (so an edge from it may still fire)."""
        forward_preds = self.shape.forward_preds
        stack = [node_id]
        while stack:
            current = stack[-1]
            if current in memo:
                stack.pop()
                continue
            record = self.document.peek(current) or {}
            if record.get("queued") or record.get("status") == _EXECUTING or record.get("back"):
                memo[current] = True
                stack.pop()
                continue
            incoming = record.get("incoming", {})
            pending = [p for p in forward_preds[current] if p not in incoming]
            unknown = [p for p in pending if p not in memo]
            if unknown:
                stack.extend(unknown)
                continue
            memo[current] = any(memo[p] for p in pending)
            stack.pop()
        return memo[node_id]


# -- the outcome (of the run in the document: also for a run loaded from a session) ------------------------


def _terminals(document: RunDocument, shape: GraphShape) -> list[str]:
    """The terminal nodes: those that completed and whose out-edges did not fire (or that have none),
    in the order they completed."""
    last_completion = {node_id: i for i, node_id in enumerate(document.log("execution_order"))}
    terminals = []
    for node_id, record in document.records():
        if not record.get("terminal", not shape.out[node_id]):
            continue
        result = document.result(node_id)
        if result is not None and result.status == Status.COMPLETED:
            terminals.append(node_id)
    return sorted(terminals, key=lambda node_id: last_completion.get(node_id, -1))


def graph_output_source(document: RunDocument, shape: GraphShape) -> dict[str, Any] | None:
    """Which node gave the output of the run that just completed (see ``NodeResult.output_from``)."""
    terminals = _terminals(document, shape)
    if len(terminals) == 1:
        return document.output_source(terminals[0])
    if not terminals:
        return None
    return {"each": {node_id: document.output_source(node_id) for node_id in terminals}}


def graph_result(document: RunDocument, shape: GraphShape, total_nodes: int) -> GraphResult:
    """The run in the document as a ``GraphResult``."""
    run = document.run
    results = document.results()
    status = Status(run["status"])
    output = None
    if status == Status.COMPLETED:
        terminals = _terminals(document, shape)
        if len(terminals) == 1:
            output = results[terminals[0]].output
        else:
            output = {node_id: results[node_id].output for node_id in terminals} or None
    return GraphResult(
        status=status,
        results=results,
        execution_order=list(document.log("execution_order")),
        output=output,
        reason=run["reason"],
        error=run["error"],
        interrupts=[Interrupt.model_validate(i) for i in run["interrupts"]],
        usage=run["usage"],
        execution_count=run["execution_count"],
        total_nodes=total_nodes,
        completed_nodes=sum(1 for r in results.values() if r.status == Status.COMPLETED),
        failed_nodes=sum(1 for r in results.values() if r.status == Status.FAILED),
    )
