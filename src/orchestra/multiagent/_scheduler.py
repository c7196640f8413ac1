"""What the Graph and Swarm schedulers share: how a run ends, retries' bookkeeping and budgets' checks.

A scheduler does no I/O, reads no clock and owns no task: it reads and changes the run document. The
local runner (anyio) and the Temporal workflow drive the same schedulers through the same methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestra.budget import Budget, Spent, exceeded
from orchestra.errors import BudgetExceededError
from orchestra.interrupts import Interrupt
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent.nodes import Node
from orchestra.multiagent.results import Status

__all__ = ["Scheduler"]

Failure = tuple[str, str | None]
"""Why a run failed: (reason, the failed node's error)."""


class Scheduler:
    """A run's outcome so far (``failure``, ``interrupts``, ``stopped``), and the bookkeeping every
    scheduler does on the document.

    Args:
        document: the run.
        nodes: the orchestrator's nodes (their kinds, joins, retry policies and budgets).
        budget: what the run may spend.
        what: how messages name the orchestrator (``graph 'review'``).
    """

    def __init__(
        self, document: RunDocument, nodes: Mapping[str, Node], budget: Budget | None, what: str
    ) -> None:
        self.document = document
        self.nodes = nodes
        self.budget = budget
        self.what = what
        self.failure: Failure | None = None
        self.interrupts: list[Interrupt] = []
        self.stopped: str | None = None  # a budget was reached: the run stops, resumable

    def fail(self, reason: str, error: str | None = None) -> None:
        """The run fails (the first failure is the one reported)."""
        if self.failure is None:
            self.failure = (reason, error)

    def stop(self, reason: str) -> None:
        """The run stops because a budget was reached (it resumes from here)."""
        if self.stopped is None:
            self.stopped = reason

    @property
    def may_start(self) -> bool:
        """Whether another node may start: the run has not failed, stopped or been interrupted."""
        return self.failure is None and not self.interrupts and self.stopped is None

    def finish(self) -> None:
        """Record in the run how it ended: failed, stopped by its budget (resumable), waiting on
        interrupts, or completed."""
        if self.failure is not None:
            self._end(Status.FAILED, *self.failure)
        elif self.stopped is not None:
            self._end(Status.INTERRUPTED, self.stopped, interrupts=self.interrupts)
        elif self.interrupts:
            self._end(Status.INTERRUPTED, "waiting for interrupt responses", interrupts=self.interrupts)
        else:
            self._end(Status.COMPLETED)

    def _end(
        self, status: Status, reason: str | None = None, error: str | None = None, interrupts: Any = ()
    ) -> None:
        self.document.update_run(
            status=status.value,
            reason=reason,
            error=error,
            interrupts=[i.model_dump(mode="json") for i in interrupts],
        )

    # -- budgets ------------------------------------------------------------------------------------------

    def budget_stop(self, node_id: str | None, elapsed_s: float) -> BudgetExceededError | None:
        """The error to stop with before ``node_id`` starts if the run (``elapsed_s`` into it) or that
        node spent its budget."""
        if self.budget is not None:
            spent = Spent.from_json(self.document.run.get("spent"))
            error = exceeded(self.budget, spent, elapsed_s, f"run of {self.what}")
            if error is not None:
                return error
        node = self.nodes.get(node_id) if node_id is not None else None
        if node is not None and node.budget is not None:
            record = self.document.peek(node_id) or {}  # type: ignore[arg-type]
            return exceeded(node.budget, Spent.from_json(record.get("spent")), 0.0, f"agent {node_id!r}")
        return None

    # -- retries ------------------------------------------------------------------------------------------

    def attempts(self, node_id: str) -> list[dict[str, Any]]:
        """The failed attempts recorded for the node's current execution (a resume goes on from them)."""
        record = self.document.peek(node_id) or {}
        if not record.get("attempts"):
            return []
        execution = record["executions"]
        return [a for a in record["attempts"] if a.get("execution") == execution]

    def record_attempt(self, node_id: str, attempt: int, error: str, wait: float) -> None:
        """Record a failed attempt that will be retried after ``wait`` seconds."""
        entry = {"execution": self.document.record(node_id)["executions"], "attempt": attempt, "error": error}
        attempts = [*self.attempts(node_id), {**entry, "retry_in": round(wait, 3)}]
        self.document.update_node(node_id, attempts=attempts)

    # -- resuming -----------------------------------------------------------------------------------------

    def continue_execution(self, node_id: str) -> None:
        """A node that was running (or stopped for an interrupt) goes on: its execution is not a new one."""
        document = self.document
        record = document.record(node_id)
        if record["status"] == Status.EXECUTING.value or (
            record["status"] == Status.INTERRUPTED.value and record.get("started", True)
        ):
            document.update_node(
                node_id, status=Status.PENDING.value, executions=max(0, record["executions"] - 1)
            )
            document.update_run(execution_count=max(0, document.run["execution_count"] - 1))
