"""``Swarm``: agents hand the task to one another with a ``handoff_to_agent`` tool and a shared context.

Every agent gets a ``handoff_to_agent(agent_name, message, context=None)`` tool. A handoff ends the
handing-off agent's turn (no model call after it); the next agent receives the message, the shared
context and the list of agents it can hand off to. The run completes when an agent answers without
handing off. Each agent keeps its own conversation across its turns within a run.

Across invocations (with a session): ``resume_from="last_active"`` starts the next invocation at the
agent that answered the last one, instead of the entry point; ``history`` says what the agents remember
of earlier invocations: ``"run"`` (the default) nothing, every invocation starts afresh; ``"shared"`` the
conversation so far (each task and who answered it, and the shared context), given to whichever agent
takes the task; ``"private"`` each agent's own conversation and state as it left them, plus the shared
context. What is kept is saved with the run (``last_active``, ``shared_context``, the ``conversation``
log, each agent's messages) and shown by ``orchestra sessions show``.

Limits: ``max_handoffs`` counts handoffs, ``max_iterations`` counts node executions (the two differ when
a node is interrupted and resumed, or fails), ``execution_timeout`` bounds the invocation,
``node_timeout`` each agent's turn, and the repetitive-handoff check fails a run whose last
``repetitive_handoff_detection_window`` turns involved fewer than ``repetitive_handoff_min_unique_agents``
agents (agents bouncing the task back and forth).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import anyio

from orchestra.agent import Agent
from orchestra.budget import Budget
from orchestra.errors import GraphError
from orchestra.hooks import HookProvider, OrchestratorSessionManager
from orchestra.interrupts import Interrupt, InterruptException
from orchestra.multiagent.base import MultiAgentBase, configure_nodes
from orchestra.multiagent.events import (
    AfterNodeCall,
    BeforeNodeCall,
    HandoffEvent,
    NodeStartEvent,
    NodeStopEvent,
)
from orchestra.multiagent.migrations import Migration
from orchestra.multiagent.nodes import Emit, Node, NodeInput
from orchestra.multiagent.results import NodeResult, Status, SwarmResult, output_json, output_text
from orchestra.retry import RetryPolicy
from orchestra.tools import FunctionTool, ToolContext

__all__ = ["HANDOFF_TOOL", "Swarm"]

HANDOFF_TOOL = "handoff_to_agent"
ResumeFrom = Literal["entry_point", "last_active"]
History = Literal["run", "shared", "private"]
_CONVERSATION_KEPT = 20  # exchanges of earlier invocations a "shared" history keeps and shows


class Swarm(MultiAgentBase):
    """Agents that hand a task to each other (see the module docstring).

    Args:
        nodes: the agents; their names are their node ids and must be unique.
        entry_point: the agent (or its name) that gets the task first; defaults to the first one.
        max_handoffs: the most handoffs in one run.
        max_iterations: the most agent turns (node executions) in one run.
        execution_timeout: seconds one invocation may take.
        node_timeout: seconds one agent turn may take.
        repetitive_handoff_detection_window: how many recent turns to check for ping-pong (0: off).
        repetitive_handoff_min_unique_agents: the fewest distinct agents those turns must involve.
        session_manager: persists the run after every turn (or invocation) so it can resume.
        id: the swarm's id (the session scope it is saved under).
        hooks: hook providers.
        state: the initial shared state, reset at the start of every fresh run.
        resume_from: where the next invocation starts: ``"entry_point"`` or ``"last_active"`` (the
            agent that answered the last one).
        history: what agents remember across invocations: ``"run"``, ``"shared"`` or ``"private"``.
        retry: a ``RetryPolicy`` for every agent's turn, or ``{agent name: RetryPolicy}``.
        budget: what one run may spend; ``budgets``: ``{agent name: Budget}``.
        version, migrations: see ``Graph``.
    """

    kind = "swarm"

    def __init__(
        self,
        nodes: Sequence[Agent],
        entry_point: Agent | str | None = None,
        max_handoffs: int = 20,
        max_iterations: int = 20,
        execution_timeout: float | None = 900.0,
        node_timeout: float | None = 300.0,
        repetitive_handoff_detection_window: int = 0,
        repetitive_handoff_min_unique_agents: int = 0,
        session_manager: OrchestratorSessionManager | None = None,
        id: str = "swarm",
        hooks: Iterable[HookProvider] | None = None,
        state: Mapping[str, Any] | None = None,
        resume_from: ResumeFrom = "entry_point",
        history: History = "run",
        retry: RetryPolicy | Mapping[str, RetryPolicy] | None = None,
        budget: Budget | None = None,
        budgets: Mapping[str, Budget] | None = None,
        version: str | None = None,
        migrations: Mapping[str, Migration] | None = None,
    ) -> None:
        if not nodes:
            raise GraphError("a swarm needs at least one agent")
        if resume_from not in ("entry_point", "last_active"):
            raise GraphError(f"resume_from is 'entry_point' or 'last_active', not {resume_from!r}")
        if history not in ("run", "shared", "private"):
            raise GraphError(f"history is 'run', 'shared' or 'private', not {history!r}")
        self.resume_from: ResumeFrom = resume_from
        self.history: History = history
        names: dict[str, Agent] = {}
        for agent in nodes:
            if not isinstance(agent, Agent):
                raise GraphError(f"swarm nodes are agents; got {agent!r}")
            if agent.name in names:
                if names[agent.name] is agent:
                    raise GraphError(
                        f"agent {agent.name!r} was added twice; each swarm node is a separate agent"
                    )
                raise GraphError(f"duplicate node id {agent.name!r}: swarm agents need unique names")
            if HANDOFF_TOOL in agent.tool_registry:
                raise GraphError(f"agent {agent.name!r} already has a tool named {HANDOFF_TOOL!r}")
            Node.check_agent(agent, agent.name)
            names[agent.name] = agent
        for name, agent in names.items():
            agent.tool_registry.add(self._handoff_tool(name, names))
        built = {name: Node(name, agent) for name, agent in names.items()}
        if entry_point is None:
            self.entry_point = nodes[0].name
        else:
            self.entry_point = entry_point.name if isinstance(entry_point, Agent) else entry_point
            if self.entry_point not in built:
                raise GraphError(
                    f"entry point {self.entry_point!r} is not an agent of the swarm ({', '.join(built)})"
                )
        for name, value in (("max_handoffs", max_handoffs), ("max_iterations", max_iterations)):
            if value < 1:
                raise GraphError(f"{name} must be at least 1, got {value}")
        self.max_handoffs = max_handoffs
        self.max_iterations = max_iterations
        self.execution_timeout = execution_timeout
        self.node_timeout = node_timeout
        self.repetitive_handoff_detection_window = repetitive_handoff_detection_window
        self.repetitive_handoff_min_unique_agents = repetitive_handoff_min_unique_agents
        self._pending_handoff: dict[str, Any] | None = None
        configure_nodes(built, retry, budgets)
        super().__init__(
            built,
            id=id,
            session_manager=session_manager,
            hooks=hooks,
            state=state,
            budget=budget,
            version=version,
            migrations=migrations,
        )

    # -- the handoff tool -----------------------------------------------------------------------------

    def _handoff_tool(self, from_node: str, agents: Mapping[str, Agent]) -> FunctionTool:
        others = [n for n in agents if n != from_node]
        listing = "; ".join(f"{n}: {agents[n].description or 'no description'}" for n in others)

        def handoff_to_agent(
            agent_name: str, message: str, tool_context: ToolContext, context: dict[str, Any] | None = None
        ) -> str:
            if agent_name == from_node:
                raise ValueError("you cannot hand off to yourself; answer, or hand off to another agent")
            if agent_name not in agents:
                raise ValueError(f"no agent named {agent_name!r}; the agents are: {', '.join(others)}")
            try:
                shared = json.loads(json.dumps(context or {}, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"context must be JSON: {exc}") from None
            self._pending_handoff = {
                "from": from_node,
                "to": agent_name,
                "message": message,
                "context": shared,
            }
            tool_context.end_turn(f"Handed off to {agent_name}.")
            return f"Handing off to {agent_name}."

        handoff_to_agent.__doc__ = (
            "Hand the task to another agent of the team, with a message saying what it should do. This ends "
            f"your turn. The agents: {listing or 'none'}.\n\n"
            "Args:\n"
            "    agent_name: the agent to hand off to.\n"
            "    message: what the next agent should do, and what you found.\n"
            "    context: JSON data to share with the agents after you.\n"
        )
        return FunctionTool(handoff_to_agent, name=HANDOFF_TOOL, context=True)

    def _topology(self, legacy: bool = False) -> dict[str, Any]:
        return {**super()._topology(legacy), "entry_point": self.entry_point}

    def structure(self) -> dict[str, Any]:
        """The swarm's agents and limits as JSON: enough to schedule it elsewhere (see ``from_structure``)."""
        structure: dict[str, Any] = {
            "kind": "swarm",
            "id": self.id,
            "nodes": {n: self._node_structure(node) for n, node in self.nodes.items()},
            "entry_point": self.entry_point,
            "state": dict(self._initial_state),
            "limits": {
                "max_handoffs": self.max_handoffs,
                "max_iterations": self.max_iterations,
                "execution_timeout": self.execution_timeout,
                "node_timeout": self.node_timeout,
                "repetitive_handoff_detection_window": self.repetitive_handoff_detection_window,
                "repetitive_handoff_min_unique_agents": self.repetitive_handoff_min_unique_agents,
            },
        }
        # Only when set: the structure of a swarm without them stays what earlier versions described.
        if self.resume_from != "entry_point" or self.history != "run":
            structure["sticky"] = {"resume_from": self.resume_from, "history": self.history}
        if self.version is not None:
            structure["version"] = self.version
        return structure

    @staticmethod
    def _node_structure(node: Node) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "agent", "description": node.agent.description}
        if node.retry is not None:
            out["retry"] = node.retry.to_json()
        return out

    @classmethod
    def from_structure(cls, structure: dict[str, Any]) -> Swarm:
        """A swarm with the same agents (stand-ins that never run) and limits, for remote scheduling."""
        agents = [
            Agent(name=n, description=spec.get("description")) for n, spec in structure["nodes"].items()
        ]
        retry = {
            n: RetryPolicy.from_json(spec["retry"])
            for n, spec in structure["nodes"].items()
            if "retry" in spec
        }
        return cls(
            agents,
            entry_point=structure["entry_point"],
            id=structure["id"],
            state=structure.get("state"),
            retry=retry or None,
            version=structure.get("version"),
            **structure.get("sticky", {}),
            **structure["limits"],
        )

    def _blank_run(self) -> None:
        super()._blank_run()
        self._stopped: str | None = None  # a budget stopped the run (see _end_turn)

    def _new_run_record(self, status: Status) -> dict[str, Any]:
        record = super()._new_run_record(status)
        if self.resume_from != "entry_point" or self.history != "run":  # shown by sessions show
            record["sticky"] = {"resume_from": self.resume_from, "history": self.history}
        return record

    # -- across invocations ---------------------------------------------------------------------------

    def _start_fresh_document(self, task: Any, run_id: str | None = None) -> None:
        """A new run; what the swarm keeps across invocations (see the module docstring) stays."""
        kept = {
            name: self._fields[name]
            for name in ("last_active", *(("shared_context",) if self.history != "run" else ()))
            if name in self._fields
        }
        conversation = list(self._logs.get("conversation", [])) if self.history == "shared" else []
        agents = (
            {n: node.agent.agent_data() for n, node in self.nodes.items()}
            if self.history == "private"
            else {}
        )
        super()._start_fresh_document(task, run_id)
        for name, value in kept.items():
            self._set(name, value)
        if conversation:
            self._logs["conversation"] = conversation
            self._dirty_logs.add("conversation")
        for node_id, data in agents.items():
            self.nodes[node_id].agent.load_agent_data(data)

    def _first_agent(self) -> str:
        last = self._fields.get("last_active")
        if self.resume_from == "last_active" and last in self.nodes:
            return str(last)
        return self.entry_point

    def _remember(self, node_id: str, output: Any) -> None:
        """A run completed with ``node_id``'s answer: what the next invocation starts from."""
        self._set("last_active", node_id)
        if self.history == "shared":
            entry = {
                "task": output_text(self._fields.get("task")),
                "agent": node_id,
                "output": output_text(output),
            }
            self._logs["conversation"] = [*self._logs.get("conversation", []), entry][-_CONVERSATION_KEPT:]
            self._dirty_logs.add("conversation")

    def output_source(self) -> dict[str, Any] | None:
        """Which agent gave the output of the run that just completed (see ``NodeResult.output_from``)."""
        order = self._logs.get("execution_order")
        return self._node_source(order[-1]) if order else None

    # -- the run --------------------------------------------------------------------------------------

    def _compose_input(self, node_id: str, activation: dict[str, Any]) -> Any:
        task = self._fields.get("task")
        handoff = activation.get("from")
        if handoff is None:
            head: Any = task
            lines = []
        else:
            head = activation["input"]
            lines = [f"Original task: {output_text(task)}", f"Handed off to you by {handoff}."]
        shared = self._fields.get("shared_context") or {}
        if shared:
            lines.append(f"Shared context: {json.dumps(shared, sort_keys=True)}")
        earlier = self._logs.get("conversation", []) if self.history == "shared" else []
        if earlier:
            exchanges = "; ".join(f"user: {e['task']} -> {e['agent']}: {e['output']}" for e in earlier)
            lines.append(f"Earlier in this conversation: {exchanges}")
        history = self._logs.get("node_history", [])
        if history:
            lines.append(f"Agents so far: {' -> '.join(history)}")
        others = [n for n in self.nodes if n != node_id]
        if others:
            lines.append(f"You can hand off with {HANDOFF_TOOL} to: {', '.join(others)}.")
        context = "Swarm context:\n" + "\n".join(f"- {line}" for line in lines)
        if isinstance(head, list):
            return [*head, {"text": context}]
        return f"{output_text(head)}\n\n{context}"

    def _repetitive(self) -> str | None:
        window = self.repetitive_handoff_detection_window
        if window <= 0:
            return None
        history = self._logs.get("node_history", [])
        recent = history[-window:]
        if len(recent) >= window and len(set(recent)) < self.repetitive_handoff_min_unique_agents:
            return (
                f"repetitive handoffs: the last {window} turns involved only {', '.join(sorted(set(recent)))} "
                f"(fewer than repetitive_handoff_min_unique_agents={self.repetitive_handoff_min_unique_agents})"
            )
        return None

    async def _run(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any]
    ) -> SwarmResult:
        self._begin_run()
        failure: tuple[str, str | None] | None = None
        interrupts: list[Interrupt] = []
        output: Any = None
        with anyio.move_on_after(self.execution_timeout) as deadline:
            while (
                self._fields.get("next") is not None
                and failure is None
                and not interrupts
                and self._stopped is None
            ):
                failure, interrupts, output = await self._turn(invocation_state, emit, responses)
        if deadline.cancelled_caught:
            failure = (f"execution_timeout ({self.execution_timeout:g}s) exceeded", None)
        self._conclude(failure, interrupts, self._stopped)
        if self.status == Status.COMPLETED:
            if output is None and self._logs.get("execution_order"):
                # Resumed after the last turn was saved but not the run's end: that turn's output.
                last = self.node_result(self._logs["execution_order"][-1])
                output = last.output if last is not None else None
            self._update_run(output=output_json(output))
        return self._build_result()

    async def _turn(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any]
    ) -> tuple[tuple[str, str | None] | None, list[Interrupt], Any]:
        """One agent turn: returns (failure, interrupts, output)."""
        node_id = self._fields["next"]["node"]
        stop = self._limit_before_turn(node_id)
        if stop is not None:
            return stop, [], None
        record = self._node_record(node_id)
        before = BeforeNodeCall(
            self, node_id, invocation_state, record["executions"] + 1, _responses=responses
        )
        try:
            await self.hooks.invoke(before)
        except InterruptException as signal:
            result = NodeResult(node_id=node_id, status=Status.INTERRUPTED, interrupts=[signal.interrupt])
            self._update_node(
                node_id, status=result.status.value, result=result.model_dump(mode="json"), started=False
            )
            await self._after_node(AfterNodeCall(self, node_id, invocation_state, result))
            return None, [signal.interrupt], None
        if before.cancel_node is not None:
            error = f"agent {node_id!r} was cancelled by a hook: {before.cancel_node}"
            result = NodeResult(node_id=node_id, status=Status.FAILED, error=error)
            self._update_node(node_id, status=result.status.value, result=result.model_dump(mode="json"))
            await self._after_node(AfterNodeCall(self, node_id, invocation_state, result))
            return (error, error), [], None
        spent = self._budget_stop(node_id)
        if spent is not None:
            self._stopped = str(spent)
            return None, [], None
        node_input = self._begin_turn(node_id, invocation_state)
        if emit is not None:
            await emit(NodeStartEvent(node_id, node_input.execution_count))
        result = await self._attempts_of_turn(node_id, node_input, emit, responses)
        result.execution_count = node_input.execution_count
        handoff, self._pending_handoff = self._pending_handoff, None
        failure, interrupts, output = self._end_turn(result, handoff)
        if emit is not None:
            if handoff is not None and result.status == Status.COMPLETED and failure is None:
                await emit(HandoffEvent(handoff["from"], handoff["to"], handoff["message"]))
            await emit(NodeStopEvent(node_id, result))
        await self._after_node(AfterNodeCall(self, node_id, invocation_state, result))
        return failure, interrupts, output

    async def _attempts_of_turn(
        self, node_id: str, node_input: NodeInput, emit: Emit | None, responses: dict[str, Any]
    ) -> NodeResult:
        """An agent's turn with its retry policy: a failure becomes a FAILED result, a budget reached an
        INTERRUPTED one without interrupts (the reason in ``error``)."""
        node = self.nodes[node_id]

        async def call() -> NodeResult:
            self._pending_handoff = None  # a failed attempt's handoff does not stand
            return await node.execute(node_input, self, emit, responses)

        return await self._node_attempts(node_id, node_input, call, self.node_timeout, f"agent {node_id!r}")

    # -- decisions (no I/O: shared by every execution backend) ----------------------------------------

    def _begin_run(self) -> None:
        """A fresh run starts at the entry point (or, with ``resume_from="last_active"``, the agent that
        answered the last run); a resumed one where it stopped."""
        self._stopped = None
        if "next" not in self._fields:
            self._set("next", {"node": self._first_agent(), "input": None, "from": None})
            if "shared_context" not in self._fields:
                self._set("shared_context", {})

    def _limit_before_turn(self, node_id: str) -> tuple[str, str | None] | None:
        """Continue an interrupted or crashed turn as the same execution; stop if max_iterations is reached."""
        self._continue_execution(node_id)
        if self.run["execution_count"] >= self.max_iterations:
            return (
                f"max_iterations limit ({self.max_iterations}) reached before agent {node_id!r} could run",
                None,
            )
        return None

    def _begin_turn(self, node_id: str, invocation_state: dict[str, Any]) -> NodeInput:
        """Mark the agent's turn started and build what it receives."""
        activation = self._fields["next"]
        executions = self._node_record(node_id)["executions"] + 1
        self._update_node(node_id, status=Status.EXECUTING.value, executions=executions, started=True)
        self._update_run(execution_count=self.run["execution_count"] + 1, current=node_id)
        return NodeInput(
            node_id=node_id,
            task=self._compose_input(node_id, activation),
            inputs={},
            state=self.state,
            invocation_state=invocation_state,
            execution_count=executions,
        )

    def _end_turn(
        self, result: NodeResult, handoff: dict[str, Any] | None
    ) -> tuple[tuple[str, str | None] | None, list[Interrupt], Any]:
        """Record a finished turn and decide what comes next: (failure, interrupts, final output)."""
        node_id = result.node_id
        self._update_node(node_id, status=result.status.value, result=result.model_dump(mode="json"))
        self._add_usage(result.usage)
        self._mark_agent(node_id)
        if result.status == Status.FAILED:
            return (f"agent {node_id!r} failed: {result.error}", result.error), [], None
        if result.status == Status.INTERRUPTED:
            if not result.interrupts:  # a budget was reached: the turn runs again on resume
                self._stopped = result.error or "BudgetExceeded"
            return None, list(result.interrupts), None
        self._append_log("execution_order", node_id)
        self._append_log("node_history", node_id)
        if handoff is None:
            self._set("next", None)
            self._remember(node_id, result.output)
            return None, [], result.output
        return self._hand_off(handoff), [], None

    def _hand_off(self, handoff: dict[str, Any]) -> tuple[str, str | None] | None:
        count = self.run.get("handoff_count", 0) + 1
        self._update_run(handoff_count=count)
        if count > self.max_handoffs:
            return (
                f"max_handoffs limit ({self.max_handoffs}) reached: {handoff['from']} tried to hand off to {handoff['to']}",
                None,
            )
        if handoff["context"]:
            shared = dict(self._fields.get("shared_context") or {})
            shared[handoff["from"]] = {**shared.get(handoff["from"], {}), **handoff["context"]}
            self._set("shared_context", shared)
        self._append_log(
            "handoffs", {"from": handoff["from"], "to": handoff["to"], "message": handoff["message"]}
        )
        self._set("next", {"node": handoff["to"], "input": handoff["message"], "from": handoff["from"]})
        repetitive = self._repetitive()
        return (repetitive, None) if repetitive else None

    def _build_result(self) -> SwarmResult:
        run = self.run
        results = {}
        for node_id in self.nodes:
            record = self._fields.get(f"node/{node_id}")
            if record and record.get("result"):
                results[node_id] = self._restored_result(node_id, record["result"])
        status = Status(run["status"])
        order = list(self._logs.get("execution_order", []))
        output = None  # none for an unfinished run
        if status == Status.COMPLETED:
            output = self._restored_output(order[-1], run.get("output")) if order else run.get("output")
        return SwarmResult(
            status=status,
            results=results,
            execution_order=order,
            output=output,
            reason=run["reason"],
            error=run["error"],
            interrupts=[Interrupt.model_validate(i) for i in run["interrupts"]],
            usage=run["usage"],
            execution_count=run["execution_count"],
            node_history=list(self._logs.get("node_history", [])),
            handoffs=list(self._logs.get("handoffs", [])),
            shared_context=dict(self._fields.get("shared_context") or {}),
        )
