"""How a Swarm run is scheduled: ``SwarmScheduler``, the decisions a swarm makes as its agents' turns end.

No I/O, no clock, no task: the run document's ``next`` field names the agent that holds the task (and
the message it was handed); a turn that ends with a handoff names the next one, a turn that answers
without one completes the run. The local runner (``Swarm._run``) and the Temporal workflow drive it
through the same methods. The rules are the module docstring of ``swarm.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestra.budget import Budget
from orchestra.interrupts import Interrupt
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent._scheduler import Scheduler
from orchestra.multiagent.nodes import Node, NodeInput
from orchestra.multiagent.results import NodeResult, Status, output_text

__all__ = ["HANDOFF_TOOL", "SwarmScheduler"]

HANDOFF_TOOL = "handoff_to_agent"
_CONVERSATION_KEPT = 20  # exchanges of earlier invocations a "shared" history keeps and shows


class SwarmScheduler(Scheduler):
    """One invocation's decisions for a Swarm, on its run document.

    A runner calls ``begin``, then for each turn ``next`` (the agent holding the task, or None),
    ``check_limits``, ``start`` (the turn's input), runs the agent, and hands its result and handoff to
    ``end_turn``; ``finish`` records how the run ended. ``output`` is the final answer's.
    """

    def __init__(
        self,
        document: RunDocument,
        nodes: Mapping[str, Node],
        *,
        entry_point: str,
        resume_from: str = "entry_point",
        history: str = "run",
        max_handoffs: int = 20,
        max_iterations: int = 20,
        repetitive_window: int = 0,
        repetitive_min_agents: int = 0,
        budget: Budget | None = None,
        what: str = "swarm",
    ) -> None:
        super().__init__(document, nodes, budget, what)
        self.entry_point = entry_point
        self.resume_from = resume_from
        self.history = history
        self.max_handoffs = max_handoffs
        self.max_iterations = max_iterations
        self.repetitive_window = repetitive_window
        self.repetitive_min_agents = repetitive_min_agents
        self.output: Any = None

    def first_agent(self) -> str:
        """Where a new run starts: the entry point, or with ``resume_from="last_active"`` the agent that
        answered the last run."""
        last = self.document.field("last_active")
        if self.resume_from == "last_active" and last in self.nodes:
            return str(last)
        return self.entry_point

    def begin(self) -> None:
        """A fresh run starts at ``first_agent``; a resumed one where it stopped."""
        document = self.document
        if "next" not in document:
            document.set("next", {"node": self.first_agent(), "input": None, "from": None})
            if "shared_context" not in document:
                document.set("shared_context", {})

    def next(self) -> str | None:
        """The agent that holds the task; None when the run is over, or failed, stopped or waits."""
        following = self.document.field("next")
        if following is None or not self.may_start:
            return None
        return str(following["node"])

    def check_limits(self, node_id: str) -> bool:
        """Before the agent's turn: an interrupted or crashed turn continues as the same execution; False
        (and the run fails) when ``max_iterations`` is reached."""
        self.continue_execution(node_id)
        if self.document.run["execution_count"] >= self.max_iterations:
            self.fail(
                f"max_iterations limit ({self.max_iterations}) reached before agent {node_id!r} could run"
            )
            return False
        return True

    def start(self, node_id: str, invocation_state: dict[str, Any]) -> NodeInput:
        """Mark the agent's turn started and build what it receives."""
        document = self.document
        activation = document.field("next")
        executions = document.record(node_id)["executions"] + 1
        document.update_node(node_id, status=Status.EXECUTING.value, executions=executions, started=True)
        document.update_run(execution_count=document.run["execution_count"] + 1, current=node_id)
        return NodeInput(
            node_id=node_id,
            task=self.compose_input(node_id, activation),
            inputs={},
            state=document.state,
            invocation_state=invocation_state,
            execution_count=executions,
        )

    def compose_input(self, node_id: str, activation: dict[str, Any]) -> Any:
        """What ``node_id`` receives when ``activation`` (the ``next`` field) hands it the task: the task
        or the handoff's message, then the swarm's context (shared context, earlier exchanges, the agents
        so far, whom it can hand off to)."""
        document = self.document
        task = document.field("task")
        handoff = activation.get("from")
        if handoff is None:
            head: Any = task
            lines = []
        else:
            head = activation["input"]
            lines = [f"Original task: {output_text(task)}", f"Handed off to you by {handoff}."]
        shared = document.field("shared_context") or {}
        if shared:
            lines.append(f"Shared context: {json.dumps(shared, sort_keys=True)}")
        earlier = document.log("conversation") if self.history == "shared" else []
        if earlier:
            exchanges = "; ".join(f"user: {e['task']} -> {e['agent']}: {e['output']}" for e in earlier)
            lines.append(f"Earlier in this conversation: {exchanges}")
        history = document.log("node_history")
        if history:
            lines.append(f"Agents so far: {' -> '.join(history)}")
        others = [n for n in self.nodes if n != node_id]
        if others:
            lines.append(f"You can hand off with {HANDOFF_TOOL} to: {', '.join(others)}.")
        context = "Swarm context:\n" + "\n".join(f"- {line}" for line in lines)
        if isinstance(head, list):
            return [*head, {"text": context}]
        return f"{output_text(head)}\n\n{context}"

    def interrupt_before(self, node_id: str, interrupt: Interrupt) -> NodeResult:
        """A hook interrupted the agent before its turn: the run waits for the answer."""
        result = NodeResult(node_id=node_id, status=Status.INTERRUPTED, interrupts=[interrupt])
        self.document.set_result(node_id, result, started=False)
        self.interrupts.append(interrupt)
        return result

    def cancel_before(self, node_id: str, error: str) -> NodeResult:
        """A hook cancelled the agent's turn before it ran: the run fails."""
        result = NodeResult(node_id=node_id, status=Status.FAILED, error=error)
        self.document.set_result(node_id, result)
        self.fail(error, error)
        return result

    def end_turn(self, result: NodeResult, handoff: dict[str, Any] | None) -> None:
        """Record a finished turn and decide what comes next: the agent ``handoff`` names, the end of the
        run (an answer without a handoff), a failure, a wait for interrupts, or a budget's stop."""
        node_id = result.node_id
        document = self.document
        document.set_result(node_id, result)
        document.add_usage(result.usage)
        document.mark_agent(node_id)
        if result.status == Status.FAILED:
            self.fail(f"agent {node_id!r} failed: {result.error}", result.error)
            return
        if result.status == Status.INTERRUPTED:
            if not result.interrupts:  # a budget was reached: the turn runs again on resume
                self.stop(result.error or "BudgetExceeded")
            self.interrupts.extend(result.interrupts)
            return
        document.append("execution_order", node_id)
        document.append("node_history", node_id)
        if handoff is None:
            document.set("next", None)
            self._remember(node_id, result.output)
            self.output = result.output
            return
        self._hand_off(handoff)

    def _hand_off(self, handoff: dict[str, Any]) -> None:
        document = self.document
        count = document.run.get("handoff_count", 0) + 1
        document.update_run(handoff_count=count)
        if count > self.max_handoffs:
            self.fail(
                f"max_handoffs limit ({self.max_handoffs}) reached: {handoff['from']} tried to hand off to "
                f"{handoff['to']}"
            )
            return
        if handoff["context"]:
            shared = dict(document.field("shared_context") or {})
            shared[handoff["from"]] = {**shared.get(handoff["from"], {}), **handoff["context"]}
            document.set("shared_context", shared)
        document.append(
            "handoffs", {"from": handoff["from"], "to": handoff["to"], "message": handoff["message"]}
        )
        document.set("next", {"node": handoff["to"], "input": handoff["message"], "from": handoff["from"]})
        repetitive = self._repetitive()
        if repetitive:
            self.fail(repetitive)

    def _repetitive(self) -> str | None:
        window = self.repetitive_window
        if window <= 0:
            return None
        recent = self.document.log("node_history")[-window:]
        if len(recent) >= window and len(set(recent)) < self.repetitive_min_agents:
            return (
                f"repetitive handoffs: the last {window} turns involved only {', '.join(sorted(set(recent)))} "
                f"(fewer than repetitive_handoff_min_unique_agents={self.repetitive_min_agents})"
            )
        return None

    def _remember(self, node_id: str, output: Any) -> None:
        """A run completed with ``node_id``'s answer: what the next invocation starts from."""
        document = self.document
        document.set("last_active", node_id)
        if self.history == "shared":
            entry = {
                "task": output_text(document.field("task")),
                "agent": node_id,
                "output": output_text(output),
            }
            document.set_log("conversation", [*document.log("conversation"), entry][-_CONVERSATION_KEPT:])
