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
from orchestra.multiagent._attempts import run_attempts
from orchestra.multiagent._swarm_schedule import HANDOFF_TOOL, SwarmScheduler
from orchestra.multiagent.base import MultiAgentBase
from orchestra.multiagent.events import BeforeNodeCall, HandoffEvent, NodeStartEvent, NodeStopEvent
from orchestra.multiagent.migrations import Migration
from orchestra.multiagent.nodes import Emit, Node, configure_nodes
from orchestra.multiagent.results import NodeResult, Status, SwarmResult, output_json
from orchestra.retry import RetryPolicy
from orchestra.tools import FunctionTool, ToolContext

__all__ = ["HANDOFF_TOOL", "Swarm"]

ResumeFrom = Literal["entry_point", "last_active"]
History = Literal["run", "shared", "private"]


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
        version, migrations, memory: see ``Graph``.
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
        memory: Any = None,
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
            memory=memory,
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

    def take_handoff(self) -> dict[str, Any] | None:
        """The handoff the last agent's turn made (``{"from", "to", "message", "context"}``), taken: the
        next turn starts without one."""
        handoff, self._pending_handoff = self._pending_handoff, None
        return handoff

    def topology(self, legacy: bool = False) -> dict[str, Any]:
        return {**super().topology(legacy), "entry_point": self.entry_point}

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

    def _new_run_record(self, status: Status) -> dict[str, Any]:
        record = super()._new_run_record(status)
        if self.resume_from != "entry_point" or self.history != "run":  # shown by sessions show
            record["sticky"] = {"resume_from": self.resume_from, "history": self.history}
        return record

    # -- the run --------------------------------------------------------------------------------------

    def start_fresh(self, task: Any, run_id: str | None = None) -> None:
        """A new run; what the swarm keeps across invocations (see the module docstring) stays."""
        document = self.document
        kept = {
            name: document.field(name)
            for name in ("last_active", *(("shared_context",) if self.history != "run" else ()))
            if name in document
        }
        conversation = list(document.log("conversation")) if self.history == "shared" else []
        agents = (
            {n: node.agent.agent_data() for n, node in self.nodes.items()}
            if self.history == "private"
            else {}
        )
        super().start_fresh(task, run_id)
        for name, value in kept.items():
            document.set(name, value)
        if conversation:
            document.set_log("conversation", conversation)
        for node_id, data in agents.items():
            self.nodes[node_id].agent.load_agent_data(data)

    def scheduler(self) -> SwarmScheduler:
        """A scheduler of this swarm's run document (one per invocation: see ``SwarmScheduler``)."""
        return SwarmScheduler(
            self.document,
            self.nodes,
            entry_point=self.entry_point,
            resume_from=self.resume_from,
            history=self.history,
            max_handoffs=self.max_handoffs,
            max_iterations=self.max_iterations,
            repetitive_window=self.repetitive_handoff_detection_window,
            repetitive_min_agents=self.repetitive_handoff_min_unique_agents,
            budget=self.budget,
            what=f"{self.kind} {self.id!r}",
        )

    def output_source(self) -> dict[str, Any] | None:
        """Which agent gave the output of the run that just completed (see ``NodeResult.output_from``)."""
        order = self.document.log("execution_order")
        return self.document.output_source(order[-1]) if order else None

    async def _run(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any]
    ) -> SwarmResult:
        scheduler = self.scheduler()
        scheduler.begin()
        with anyio.move_on_after(self.execution_timeout) as deadline:
            while (node_id := scheduler.next()) is not None and scheduler.check_limits(node_id):
                await self._turn(scheduler, node_id, invocation_state, emit, responses)
        if deadline.cancelled_caught:
            scheduler.fail(f"execution_timeout ({self.execution_timeout:g}s) exceeded")
        scheduler.finish()
        if self.status == Status.COMPLETED:
            output = scheduler.output
            order = self.document.log("execution_order")
            if output is None and order:
                # Resumed after the last turn was saved but not the run's end: that turn's output.
                last = self.document.result(order[-1])
                output = last.output if last is not None else None
            self.document.update_run(output=output_json(output))
        return self.build_result()

    async def _turn(
        self,
        scheduler: SwarmScheduler,
        node_id: str,
        invocation_state: dict[str, Any],
        emit: Emit | None,
        responses: dict[str, Any],
    ) -> None:
        """One agent turn, run by the local runner."""
        if self.hooks.has_callbacks(BeforeNodeCall):
            executions = self.document.record(node_id)["executions"]
            before = BeforeNodeCall(self, node_id, invocation_state, executions + 1, _responses=responses)
            try:
                await self.hooks.invoke(before)
            except InterruptException as signal:
                await self.after_node(node_id, scheduler.interrupt_before(node_id, signal.interrupt))
                return
            if before.cancel_node is not None:
                error = f"agent {node_id!r} was cancelled by a hook: {before.cancel_node}"
                await self.after_node(node_id, scheduler.cancel_before(node_id, error))
                return
        if self.metered():
            spent = scheduler.budget_stop(node_id, self.elapsed_ms() / 1000)
            if spent is not None:
                scheduler.stop(str(spent))
                return
        node_input = scheduler.start(node_id, invocation_state)
        if emit is not None:
            await emit(NodeStartEvent(node_id, node_input.execution_count))
        node = self.nodes[node_id]

        async def call() -> NodeResult:
            self._pending_handoff = None  # a failed attempt's handoff does not stand
            return await node.execute(node_input, self, emit, responses)

        result = await run_attempts(
            self, scheduler, node_id, node_input, call, self.node_timeout, f"agent {node_id!r}"
        )
        handoff = self.take_handoff()
        scheduler.end_turn(result, handoff)
        if emit is not None:
            if handoff is not None and result.status == Status.COMPLETED and scheduler.failure is None:
                await emit(HandoffEvent(handoff["from"], handoff["to"], handoff["message"]))
            await emit(NodeStopEvent(node_id, result))
        await self.after_node(node_id, result)

    def build_result(self) -> SwarmResult:
        """The run in the document as a ``SwarmResult`` (as the run returned it, or would have so far)."""
        document = self.document
        run = document.run
        results = {n: r for n in self.nodes if (r := document.result(n)) is not None}
        status = Status(run["status"])
        order = list(document.log("execution_order"))
        output = None  # none for an unfinished run
        if status == Status.COMPLETED:
            output = document.restored_output(order[-1], run.get("output")) if order else run.get("output")
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
            node_history=list(document.log("node_history")),
            handoffs=list(document.log("handoffs")),
            shared_context=dict(document.field("shared_context") or {}),
        )
