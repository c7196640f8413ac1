"""Nodes: an Agent, a plain Python function (sync or async), or a nested Graph or Swarm."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio.to_thread
import structlog

from orchestra import tracing
from orchestra._context import current_orchestrator
from orchestra._logging import get_logger
from orchestra.agent import Agent, AgentData, AgentResult, ResultEvent
from orchestra.agent.state import JSONState
from orchestra.budget import Budget
from orchestra.errors import GraphError
from orchestra.interrupts import Interrupt, InterruptException
from orchestra.multiagent._orchestrator import Orchestrator, RunOptions
from orchestra.multiagent.events import MultiAgentResultEvent, NodeStreamEvent
from orchestra.multiagent.map import Map
from orchestra.multiagent.results import MultiAgentResult, NodeResult, Status, output_text
from orchestra.retry import RetryPolicy
from orchestra.waits import waiting_scope

__all__ = ["Emit", "Node", "NodeInput", "NodeKind", "configure_nodes", "format_input"]

_log = get_logger("orchestra.multiagent")
_logged = logging.getLogger("orchestra.multiagent")

NodeKind = Literal["agent", "function", "orchestrator", "map"]
Join = Literal["all", "any"]
Emit = Callable[[Any], Awaitable[None]]
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def format_input(task: Any, inputs: dict[str, Any]) -> Any:
    """A node's prompt: the original task, then the outputs of the predecessors it waited for.

    With no predecessor outputs (an entry node) the task is passed as it is. Otherwise the text is::

        <task>

        Inputs from earlier nodes:

        From <node id>:
        <output>

    (one ``From`` section per predecessor, in the order they finished). A task given as content blocks
    keeps its blocks and gets this text appended as one more text block.
    """
    if not inputs:
        return task
    sections = "\n\n".join(f"From {node_id}:\n{output_text(output)}" for node_id, output in inputs.items())
    addition = f"Inputs from earlier nodes:\n\n{sections}"
    if isinstance(task, list):
        return [*task, {"text": addition}]
    return f"{output_text(task)}\n\n{addition}" if task is not None else addition


@dataclass
class NodeInput:
    """What a function node receives.

    Attributes:
        node_id: the node being run.
        task: the run's original task.
        inputs: the outputs of the predecessors this execution waited for, by node id.
        state: the orchestrator's shared state (``get``/``set``/``delete``, JSON values only).
        invocation_state: the dict passed to the run, shared by every node, condition, hook and tool.
        execution_count: which execution of this node this is.
        attempt: which attempt of this execution this is (more than 1 when a retry policy tries again).
        item: in a map node's item, the item (see ``orchestra.multiagent.Map``).
        index: in a map node's item, the item's position in the list (0-based).
    """

    node_id: str
    task: Any
    inputs: dict[str, Any]
    state: JSONState
    invocation_state: dict[str, Any]
    execution_count: int = 1
    attempt: int = 1
    item: Any = None
    index: int | None = None
    _responses: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def memory(self) -> Any:
        """The run's ``MemoryStore`` (``Graph(memory=...)``, or the server's for the caller), if any."""
        return self.invocation_state.get("memory")

    @property
    def text(self) -> str:
        """The task and the predecessors' outputs as text (what an agent node would receive)."""
        return output_text(format_input(self.task, self.inputs))

    @property
    def prompt(self) -> Any:
        """What an agent or nested orchestrator node receives (see :func:`format_input`)."""
        return format_input(self.task, self.inputs)

    def interrupt(self, name: str, reason: Any = None) -> Any:
        """Stop the run until a human answers; returns the answer when the run is resumed with it."""
        where = self.node_id if self.index is None else f"{self.node_id}[{self.index}]"
        interrupt_id = Interrupt.make_id(f"node:{where}:{self.execution_count}:fn", name)
        if interrupt_id in self._responses:
            return self._responses[interrupt_id]
        raise InterruptException(Interrupt(id=interrupt_id, name=name, reason=reason))

    def asked_before(self, interrupt_id: str) -> Any:
        """The reason this node's last run stopped on ``interrupt_id`` with, if it did (a node run again
        without an answer, as a takeover does, asks the same: a durable wait keeps its time)."""
        orchestrator = current_orchestrator.get()
        if orchestrator is None or self.index is not None:
            return None
        result = (orchestrator.document.node(self.node_id) or {}).get("result") or {}
        return next(
            (i.get("reason") for i in result.get("interrupts") or [] if i.get("id") == interrupt_id), None
        )


def _json_copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists and scalars), several times faster than a JSON round trip
    for the small dicts conversation managers keep."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    return value


def _copy_agent_data(data: AgentData) -> AgentData:
    """An independent copy (``agent_data()`` shares the live history list and its state's objects)."""
    return AgentData(
        messages=list(data.messages),
        state=data.state,  # agent_data() copied it already
        conversation_manager_state=_json_copy(data.conversation_manager_state),
        system_prompt=data.system_prompt,
        interrupt_state=data.interrupt_state,
    )


def _inspect_function(executor: Any) -> tuple[bool, bool]:
    takes_input = bool(inspect.signature(executor).parameters)
    is_async = inspect.iscoroutinefunction(executor) or inspect.iscoroutinefunction(
        getattr(executor, "__call__", None)  # noqa: B004 - async callable objects
    )
    return takes_input, is_async


_cached_function_shape = functools.lru_cache(maxsize=1024)(_inspect_function)


def _function_shape(executor: Any) -> tuple[bool, bool]:
    """Whether a function node's callable takes the node input, and whether it is async (inspected once
    per function: a pipeline built per Temporal activity would inspect every function every time)."""
    try:
        return _cached_function_shape(executor)
    except TypeError:  # an unhashable callable object
        return _inspect_function(executor)


class Node:
    """One node of a Graph or Swarm, whatever runs it.

    ``retry`` is the node's retry policy (None: ``DEFAULT_RETRY``); ``budget`` caps what an agent node
    (its nested agents and map items included) may spend in one run.
    """

    def __init__(
        self,
        node_id: str,
        executor: Any,
        join: Join = "all",
        *,
        retry: RetryPolicy | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.node_id = node_id
        self.executor = executor
        if join not in ("all", "any"):
            raise GraphError(f"node {node_id!r}: join must be 'all' or 'any', not {join!r}")
        self.join: Join = join
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise GraphError(f"node {node_id!r}: retry must be a RetryPolicy, not {type(retry).__name__}")
        if budget is not None and not isinstance(budget, Budget):
            raise GraphError(f"node {node_id!r}: budget must be a Budget, not {type(budget).__name__}")
        self.retry = retry
        self.budget = budget
        self.kind: NodeKind
        self.initial: AgentData | None = None
        if isinstance(executor, Map):
            self.kind = "map"
        elif isinstance(executor, Agent):
            self.check_agent(executor, node_id)
            self.kind = "agent"
            self.initial = _copy_agent_data(executor.agent_data())
        elif not inspect.isroutine(executor) and isinstance(executor, Orchestrator):  # a Graph or Swarm
            # (A protocol's isinstance costs tens of microseconds: a plain function, which a map builds a
            # node for per item, is told apart first.)
            if executor.session_manager is not None:
                raise GraphError(
                    f"nested {type(executor).__name__} {executor.id!r} (node {node_id!r}) has its own session "
                    "manager; only the outermost orchestrator may own one (it persists nested runs too)"
                )
            self.kind = "orchestrator"
        elif callable(executor):
            self.kind = "function"
            self._takes_input, self._is_async = _function_shape(executor)
        else:
            raise GraphError(
                f"node {node_id!r}: {executor!r} is not a node; use an Agent, a Graph or Swarm, or a function"
            )

    @staticmethod
    def check_agent(agent: Agent, node_id: str) -> None:
        """Refuse an agent with its own session manager: only the orchestrator may own one."""
        if agent.session_manager is not None:
            raise GraphError(
                f"agent {agent.name!r} (node {node_id!r}) has its own session manager; only the "
                "orchestrator may own a session manager: remove it from the agent and give it to the "
                "Graph or Swarm (set_session_manager / session_manager=)"
            )

    @property
    def agent(self) -> Agent:
        assert isinstance(self.executor, Agent)
        return self.executor

    def reset(self) -> None:
        """Put an agent node back to the state it had when the orchestrator was built."""
        if self.initial is not None:
            self.agent.load_agent_data(_copy_agent_data(self.initial))

    def execute(
        self,
        node_input: NodeInput,
        orchestrator: Orchestrator,
        emit: Emit | None,
        responses: dict[str, Any],
    ) -> Awaitable[NodeResult]:
        """Run the node once (await it). Exceptions propagate (the orchestrator fails the node and the run)."""
        if tracing.recording():
            return self._execute_traced(node_input, orchestrator, emit, responses)
        if _logged.isEnabledFor(logging.INFO):
            return self._execute_logged(node_input, orchestrator, emit, responses)
        return self._execute(node_input, orchestrator, emit, responses)  # nothing to pay for per node

    async def _execute_traced(
        self,
        node_input: NodeInput,
        orchestrator: Orchestrator,
        emit: Emit | None,
        responses: dict[str, Any],
    ) -> NodeResult:
        attributes = {
            "orchestra.node.id": self.node_id,
            "orchestra.node.kind": self.kind,
            "orchestra.node.attempt": node_input.execution_count,
            "orchestra.run.resumed": orchestrator.resumed,
        }
        with tracing.span(f"execute_node {self.node_id}", attributes) as node_span:
            result = await self._execute_logged(node_input, orchestrator, emit, responses)
            node_span.set(orchestra__node__status=result.status.value)
            node_span.usage(result.usage)
            return result

    async def _execute_logged(
        self,
        node_input: NodeInput,
        orchestrator: Orchestrator,
        emit: Emit | None,
        responses: dict[str, Any],
    ) -> NodeResult:
        if not _logged.isEnabledFor(logging.INFO):
            return await self._execute(node_input, orchestrator, emit, responses)
        with structlog.contextvars.bound_contextvars(node_id=self.node_id):
            _log.info("node.start", execution=node_input.execution_count)
            result = await self._execute(node_input, orchestrator, emit, responses)
            _log.info("node.end", status=result.status.value, error=result.error)
        return result

    async def _execute(
        self,
        node_input: NodeInput,
        orchestrator: Orchestrator,
        emit: Emit | None,
        responses: dict[str, Any],
    ) -> NodeResult:
        started = time.perf_counter()
        token = current_orchestrator.set(orchestrator)
        # A node that fails or is cancelled re-runs from the state it had before it started.
        before = _copy_agent_data(self.agent.agent_data()) if self.kind == "agent" else None
        try:
            if self.kind == "agent":
                result = await self._run_agent(node_input, emit, responses)
            elif self.kind == "orchestrator":
                result = await self._run_orchestrator(node_input, emit, responses, orchestrator.run_options)
            else:
                result = await self._run_function(node_input, responses, orchestrator.sync_nodes)
        except InterruptException as signal:
            result = NodeResult(
                node_id=self.node_id, status=Status.INTERRUPTED, interrupts=[signal.interrupt]
            )
        except BaseException:
            # ...unless a side-effecting tool of its turn ran: that turn stays open (its ledger is saved),
            # and the node's next run resumes it rather than running the effect again.
            pending = self.agent.pending_tools if self.kind == "agent" else None
            if before is not None and not (pending is not None and pending.started):
                self.agent.load_agent_data(before)
            raise
        finally:
            current_orchestrator.reset(token)
        result.execution_time_ms = (time.perf_counter() - started) * 1000
        result.execution_count = node_input.execution_count
        return result

    async def _run_agent(
        self, node_input: NodeInput, emit: Emit | None, responses: dict[str, Any]
    ) -> NodeResult:
        agent = self.agent
        pending = agent.pending_tools
        if pending is not None and any(i in responses for i in pending.interrupts):
            prompt: Any = [
                {"interruptResponse": {"interruptId": i, "response": responses[i]}}
                for i in pending.interrupts
                if i in responses
            ]
        else:
            prompt = node_input.prompt
        state = node_input.invocation_state
        if emit is None:
            result: AgentResult = await agent.invoke_async(prompt, invocation_state=state)
        else:
            result = await self._forward(agent.stream_async(prompt, invocation_state=state), emit)
        interrupted = result.stop_reason == "interrupt"
        return NodeResult(
            node_id=self.node_id,
            status=Status.INTERRUPTED if interrupted else Status.COMPLETED,
            # A structured output is what conditions see (state.output(node).total); else the text.
            output=result.output if result.output is not None else result.text,
            message=result.message,
            usage=result.metrics.usage,
            interrupts=result.interrupts,
        )

    async def _run_orchestrator(
        self, node_input: NodeInput, emit: Emit | None, responses: dict[str, Any], options: RunOptions
    ) -> NodeResult:
        nested: Orchestrator = self.executor
        mine = nested.open_interrupt_ids()
        answers = [
            {"interruptResponse": {"interruptId": i, "response": r}}
            for i, r in responses.items()
            if i in mine
        ]
        task = answers or node_input.prompt
        state = node_input.invocation_state
        run: dict[str, Any] = {"invocation_state": state, "force_resume": options.force_resume}
        if emit is None:
            outcome: MultiAgentResult = await nested.invoke_async(task, **run)
        else:
            outcome = await self._forward(nested.stream_async(task, **run), emit)
        return NodeResult(
            node_id=self.node_id,
            status=outcome.status,
            output=outcome.output,
            # Where a structured output came from, so that a resumed run gives it back as its model.
            output_from=nested.output_source() if outcome.status == Status.COMPLETED else None,
            # A failure's reason, or a budget's (an interrupted run without questions: see budget.py).
            error=outcome.reason if outcome.status == Status.FAILED or not outcome.interrupts else None,
            usage=outcome.usage,
            interrupts=outcome.interrupts,
        )

    async def _forward(self, events: AsyncGenerator[Any, None], emit: Emit) -> Any:
        """Pass a stream's events on, tagged with this node's id; return its final result."""
        result: Any = None
        async with aclosing(events) as stream:
            async for event in stream:
                await emit(NodeStreamEvent(self.node_id, event))
                if isinstance(event, ResultEvent | MultiAgentResultEvent):
                    result = event.result
        assert result is not None, "a stream always ends with its result"
        return result

    async def _run_function(
        self, node_input: NodeInput, responses: dict[str, Any], sync_nodes: anyio.Lock
    ) -> NodeResult:
        node_input._responses = responses
        fn = self.executor
        args = (node_input,) if self._takes_input else ()
        if self._is_async:
            with waiting_scope(node_input):  # orchestra.sleep / wait_for_event ask through the node
                value = await fn(*args)
        else:
            # Sync functions run in a worker thread, one at a time per orchestrator, so their reads and
            # writes of the shared state never interleave. A timeout or cancellation stops waiting for
            # the thread at once (the node fails then); the thread itself cannot be killed and finishes
            # in the background.
            async with sync_nodes:
                value = await anyio.to_thread.run_sync(lambda: fn(*args), abandon_on_cancel=True)
            if inspect.isawaitable(value):
                value = await value
        try:
            if type(value) not in _JSON_SCALARS:  # a map's items often return one: no encoding then
                json.dumps(value)
        except (TypeError, ValueError):
            raise GraphError(
                f"function node {self.node_id!r} returned a {type(value).__name__}, which is not JSON; "
                "return text, numbers, lists or dicts so the result can be persisted"
            ) from None
        return NodeResult(node_id=self.node_id, status=Status.COMPLETED, output=value)


def configure_nodes(
    nodes: Mapping[str, Node],
    retry: RetryPolicy | Mapping[str, RetryPolicy] | None,
    budgets: Mapping[str, Budget] | None,
) -> None:
    """Give nodes the retry policies and budgets an orchestrator was built with.

    Raises:
        GraphError: a policy or budget names a node the orchestrator does not have.
    """
    if isinstance(retry, RetryPolicy):
        for node in nodes.values():
            node.retry = node.retry or retry
        retry = None
    for what, given in (("retry", retry), ("budgets", budgets)):
        unknown = sorted(set(given or {}) - set(nodes))
        if unknown:
            raise GraphError(
                f"{what} names unknown node(s): {', '.join(unknown)} (the nodes: {', '.join(nodes)})"
            )
    for node_id, policy in (retry or {}).items():
        if not isinstance(policy, RetryPolicy):
            raise GraphError(f"retry[{node_id!r}] must be a RetryPolicy, not {type(policy).__name__}")
        nodes[node_id].retry = policy
    for node_id, budget in (budgets or {}).items():
        if not isinstance(budget, Budget):
            raise GraphError(f"budgets[{node_id!r}] must be a Budget, not {type(budget).__name__}")
        nodes[node_id].budget = budget
