"""What Graph and Swarm share: nodes, shared state, hooks, sessions, sync and stream facades, fresh runs
and resumes (versions, migrations, the topology check), budgets, interrupts and the save lock.

The run's state is its *document* (``self.document``, a ``RunDocument``: ``_run_document.py`` says what
it holds); what runs next is decided by a scheduler of the document (``GraphScheduler``,
``SwarmScheduler``), driven here by the local runner.
"""

from __future__ import annotations

import copy
import hashlib
import json
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any, Self

import anyio
import structlog

from orchestra import tracing
from orchestra._concurrency import unwrap_group
from orchestra._ids import validate_id
from orchestra._logging import get_logger
from orchestra._sync import run_sync
from orchestra.agent.state import JSONState
from orchestra.budget import Budget
from orchestra.errors import ConfigurationError, RunError
from orchestra.hooks import HookProvider, HookRegistry, OrchestratorSessionManager
from orchestra.interrupts import interrupt_responses, is_interrupt_responses
from orchestra.multiagent import migrations as _migrations
from orchestra.multiagent._invocation import Exclusive, asked_interrupts, collect_answers
from orchestra.multiagent._metering import Meter, SpendingCounter
from orchestra.multiagent._orchestrator import Orchestrator, RunOptions
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent.events import (
    AfterMultiAgentInvocation,
    AfterNodeCall,
    BeforeMultiAgentInvocation,
    MultiAgentInitialized,
    MultiAgentResultEvent,
    MultiAgentStreamEvent,
)
from orchestra.multiagent.nodes import Emit, Node
from orchestra.multiagent.results import MultiAgentResult, NodeResult, Status
from orchestra.waits import is_wait_answer

__all__ = ["MultiAgentBase"]

_UNFINISHED = (Status.EXECUTING, Status.FAILED, Status.INTERRUPTED)


class MultiAgentBase:
    """The common part of ``Graph`` and ``Swarm``; not used directly."""

    kind = "multiagent"
    spec: Any = None
    """The ``PipelineSpec`` this orchestrator was loaded from, if any (see ``to_yaml``)."""
    spec_dir: Any = None

    def __init__(
        self,
        nodes: Mapping[str, Node],
        *,
        id: str,
        session_manager: OrchestratorSessionManager | None = None,
        hooks: Iterable[HookProvider] | None = None,
        state: Mapping[str, Any] | None = None,
        budget: Budget | None = None,
        version: str | None = None,
        migrations: Mapping[str, _migrations.Migration] | None = None,
        memory: Any = None,
    ) -> None:
        self.id = validate_id(id, "orchestrator id")
        self.budget = budget
        """What a run may spend (see ``orchestra.multiagent.budget``); may be changed between invocations."""
        self.version = version
        """The user's name for this version of the pipeline, recorded in every run it starts."""
        self.migrations: dict[str, _migrations.Migration] = dict(migrations or {})
        """``{saved version: fn}``: how runs saved on an older version are carried over (see migrations.py)."""
        self.memory = memory
        """The ``MemoryStore`` every node reaches as ``invocation_state["memory"]`` (agents' memory tools
        and ``MemoryContext`` use it; a function node reads ``node_input.memory``), unless the caller's
        invocation state holds one already."""
        self.scope_id = self.id  # where a session keeps this orchestrator (nested ones get a derived scope)
        self.nodes: dict[str, Node] = dict(nodes)
        self._initial_state = dict(state or {})
        self.hooks = HookRegistry()
        for provider in hooks or []:
            self.hooks.add_hook(provider)
        self.log = get_logger("orchestra.multiagent", orchestrator=self.id)
        self._blank_run()
        self.session_manager = session_manager
        if session_manager is not None:
            self._attach_session_manager(session_manager)
        if self.hooks.has_callbacks(MultiAgentInitialized):
            run_sync(self.hooks.invoke, MultiAgentInitialized(self))

    def _blank_run(self) -> None:
        """What belongs to one orchestrator object's runs, not to its structure: the shared state, the
        locks and the run document (see ``copy_for_run``)."""
        self.state = JSONState(self._initial_state, owner=f"{self.kind} {self.id!r} state")
        self.document = RunDocument(self.nodes, self.state, self._new_run_record(Status.PENDING))
        """The run: its fields and logs (see ``RunDocument``), the one way to read or change it."""
        self._invoking = threading.Lock()
        self.run_options = RunOptions()
        self.resumed = False
        self.sync_nodes = anyio.Lock()  # sync function nodes run one at a time (see Node._run_function)
        # Saves come from the run loop and, in the middle of a node, from map items, retried attempts
        # and model calls under a budget: one at a time, so the journal sees one writer.
        self._saving = anyio.Lock()
        self._meter: Meter | None = None
        self._counter: SpendingCounter | None = None  # see count_spending_with
        self._invocation_state: dict[str, Any] = {}
        self._started_at: float | None = None  # perf_counter() when this invocation started running
        self._base_ms = 0.0  # the run's execution time before this invocation

    def copy_for_run(self) -> Self:
        """A copy that shares this orchestrator's structure (nodes, edges, conditions, hooks) and has its
        own run document, shared state and locks, and no session manager. A Temporal worker runs a
        function node on such a copy of a pipeline it built once: a function holds no state of its own, so
        nothing of one node's activity reaches another's. (Agents and nested orchestrators do hold state:
        their nodes run on a pipeline built afresh.)"""
        clone = copy.copy(self)
        clone.nodes = dict(self.nodes)
        clone.session_manager = None
        clone._blank_run()
        return clone

    def _attach_session_manager(self, session_manager: OrchestratorSessionManager) -> None:
        if not isinstance(session_manager, OrchestratorSessionManager):
            raise ConfigurationError(
                f"{self.kind} {self.id!r}: {type(session_manager).__name__} cannot persist a Graph or Swarm; "
                "use SnapshotSessionManager or a repository-based session manager"
            )
        session_manager.register_multi_agent_hooks(self.hooks)
        # Nested orchestrators are persisted by the same session manager, each in a scope of its own,
        # so a resumed run also resumes inside them.
        for node_id, node in self.nodes.items():
            if node.kind == "orchestrator":
                nested: MultiAgentBase = node.executor
                nested.scope_id = f"{self.scope_id}.{node_id}"
                nested.session_manager = session_manager
                nested._attach_session_manager(session_manager)

    def set_session_manager(self, session_manager: OrchestratorSessionManager) -> None:
        """Give this orchestrator a session manager (before its first invocation)."""
        if self.session_manager is not None:
            raise ConfigurationError(f"{self.kind} {self.id!r} already has a session manager")
        self.session_manager = session_manager
        self._attach_session_manager(session_manager)

    def orchestrators(self) -> list[Orchestrator]:
        """This orchestrator and every nested one, outermost first (each has a session scope of its own)."""
        found: list[Orchestrator] = [self]
        for node in self.nodes.values():
            if node.kind == "orchestrator":
                found.extend(node.executor.orchestrators())
        return found

    # -- the run (its document) -----------------------------------------------------------------------

    @property
    def run(self) -> dict[str, Any]:
        """The run record: status, counters, usage, reason, version, budget, spent, ..."""
        return self.document.run

    @property
    def status(self) -> Status:
        """The status of the current (or last) run."""
        return self.document.status

    def serialize_state(self) -> dict[str, Any]:
        """The whole run as a plain JSON dict (what a session persists); see ``deserialize_state``."""
        return self.document.dump()

    def deserialize_state(self, payload: Mapping[str, Any]) -> None:
        """Restore what ``serialize_state`` (or a session) produced; the next invocation resumes from it."""
        self.document.load_json(payload)

    def node_result(self, node_id: str) -> NodeResult | None:
        """The latest result of a node in this run."""
        return self.document.result(node_id)

    def failed_attempts(self, node_id: str) -> list[dict[str, Any]]:
        """The failed attempts of the node's latest execution that its retry policy tried again:
        ``{"attempt", "error", "retry_in"}`` each (saved with the run; ``orchestra sessions show``)."""
        return self.document.failed_attempts(node_id)

    def restore_output(self, output: Any, source: dict[str, Any] | None) -> Any:
        """An output this orchestrator gave, read back from JSON, as the models it held; ``source`` is what
        ``output_source`` said when the run gave it (None: the output stays as it is)."""
        if source is None or output is None:
            return output
        each = source.get("each")
        if each is not None:
            if not isinstance(output, dict):
                return output
            return {key: self.restore_output(value, each.get(key)) for key, value in output.items()}
        return self.document.restored_output(source["node"], output, source.get("from"))

    def output_source(self) -> dict[str, Any] | None:
        """Which node gave the output of the run that just completed (see ``NodeResult.output_from``)."""
        raise NotImplementedError

    def build_result(self) -> MultiAgentResult:
        """The run in the document as a result (as the run returned it, or would have so far)."""
        raise NotImplementedError

    def _new_run_record(self, status: Status) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "status": status.value,
            "topology": self.topology_hash(),
            "version": self.version,
            "execution_count": 0,
            "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
            "reason": None,
            "error": None,
            "interrupts": [],
            "execution_time_ms": 0.0,
            "run_id": None,
            "answers": {},
        }

    def start_fresh(self, task: Any, run_id: str | None = None) -> None:
        """Start a new run of ``task``: reset the run document, the shared state and every agent node."""
        record = self._new_run_record(Status.EXECUTING)
        record["run_id"] = run_id or secrets.token_hex(8)
        # The topology is unchanged from one run to the next, so the journal writes it once per session.
        self.document.reset(record, task=task, topology=self._recorded_topology())
        self.state.replace(self._initial_state)
        # Agents used as tools keep their conversation from run to run (as they do within a process).
        for node in self.nodes.values():
            node.reset()

    # -- saving during a run --------------------------------------------------------------------------

    async def after_node(self, node_id: str, result: NodeResult, *, partial: bool = False) -> None:
        """Run the ``AfterNodeCall`` hooks (the session saves there), one save at a time."""
        if not self.hooks.has_callbacks(AfterNodeCall):
            return  # nothing listens (no session manager, no hook): per node, nothing to pay for
        async with self._saving:
            if self._started_at is not None:
                self.document.update_run(execution_time_ms=self.elapsed_ms())
            await self.hooks.invoke(AfterNodeCall(self, node_id, self._invocation_state, result, partial))

    async def save_progress(self, node_id: str, result: NodeResult | None = None) -> None:
        """Save in the middle of a node (``AfterNodeCall`` with ``partial=True``): a map item finished,
        an attempt failed and will be retried, a model call was charged to a budget."""
        if not self.hooks.has_callbacks(AfterNodeCall):
            return
        result = result or NodeResult(node_id=node_id, status=Status.EXECUTING)
        await self.after_node(node_id, result, partial=True)

    def elapsed_ms(self) -> float:
        """The run's execution time so far, this invocation included (across resumes)."""
        if self._started_at is None:
            return float(self.run["execution_time_ms"])
        return self._base_ms + (time.perf_counter() - self._started_at) * 1000

    def count_spending(self, executor: Any, node_id: str) -> None:
        """Charge the model calls of ``executor``, built during the run (a map item's agent or pipeline),
        to node ``node_id`` and the run, when the run counts its spending."""
        counter = self._counter or self._meter
        if counter is not None:
            counter.attach(executor, node_id)

    def count_spending_with(self, counter: SpendingCounter) -> None:
        """Charge what ``count_spending`` is given to ``counter`` instead of this run's own meter: a
        Temporal activity running one map item counts its spending against the run's budgets there."""
        self._counter = counter

    def metered(self) -> bool:
        """Whether a run counts its spending: it has a budget, or one of its agents has."""
        return self.budget is not None or any(node.budget is not None for node in self.nodes.values())

    def as_tool(self, name: str | None = None, description: str | None = None) -> Any:
        """This Graph or Swarm as a tool an agent's model can call (``{"input": "..."}`` -> the run's
        output). Each call is a fresh run with the caller's invocation state; a run that does not complete
        is an error result naming why."""
        from orchestra.tools.delegate import DelegateTool

        return DelegateTool(self, name, description)

    # -- YAML -----------------------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, path: str, **options: Any) -> Any:
        """Load a pipeline of this kind from a YAML spec (see ``orchestra.load`` for the options)."""
        from orchestra.spec import load

        built = load(path, **options)
        if not isinstance(built, cls):
            raise ConfigurationError(f"{path} describes a {type(built).__name__}, not a {cls.__name__}")
        return built

    def to_yaml(self) -> str:
        """The YAML spec this orchestrator was loaded from; loading it gives the same pipeline."""
        if self.spec is None:
            raise ConfigurationError(
                f"{self.kind} {self.id!r} was built in Python, not loaded from YAML: there is no spec to write"
            )
        from orchestra.spec import dump_yaml

        return dump_yaml(self.spec)

    # -- topology, versions and migrations -------------------------------------------------------------

    def topology(self, legacy: bool = False) -> dict[str, Any]:
        """What a run records of the structure it started on: nodes and their kinds (a Graph adds its
        edges, joins, conditions and entry points; a Swarm its entry point). See ``migrations.py``."""
        return {"kind": self.kind, "nodes": {n: node.kind for n, node in sorted(self.nodes.items())}}

    def _recorded_topology(self) -> dict[str, Any]:
        """``topology()``, made once: nodes and edges are fixed once built, and every fresh run records it
        (read it, do not change it)."""
        cached: dict[str, Any] | None = self.__dict__.get("_topology")
        if cached is None:
            cached = self.__dict__["_topology"] = self.topology()
        return cached

    def topology_hash(self) -> str:
        """A hash of the nodes and edges: a run saved with another topology is not resumed silently."""
        cached: str | None = self.__dict__.get("_topology_hash")
        if cached is None:  # every fresh run record needs the hash
            text = json.dumps(self._recorded_topology(), sort_keys=True)
            cached = self.__dict__["_topology_hash"] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return cached

    def _legacy_topology_hash(self) -> str:
        """The hash versions before 0.2 saved (no join modes, conditions only as present or not)."""
        text = json.dumps(self.topology(legacy=True), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def same_topology(self, saved: str | None) -> bool:
        """Whether a saved run's topology hash is this orchestrator's (a run saved by an earlier version
        with the older, coarser hash is accepted when that hash matches)."""
        return saved in (self.topology_hash(), self._legacy_topology_hash())

    def migrate(self, force: bool = False) -> None:
        """Carry the loaded run over to this orchestrator before it resumes: migrate a run saved on another
        version, or refuse one saved by another graph (naming what changed) unless ``force``.

        Raises:
            RunError: see ``orchestra.multiagent.migrations.carry_over``.
        """
        pipeline = _migrations.Pipeline(
            what=f"{self.kind} {self.id!r}",
            version=self.version,
            migrations=self.migrations,
            topology=self.topology(),
            hashes=(self.topology_hash(), self._legacy_topology_hash()),
            node_ids=frozenset(self.nodes),
        )
        applied = _migrations.carry_over(self.document, pipeline, force)
        if applied:
            self.log.info("run.migrated", steps=applied)

    # -- invocation -----------------------------------------------------------------------------------

    def open_interrupt_ids(self) -> set[str]:
        """The interrupts this run waits on (asked, whether answered yet or not)."""
        return asked_interrupts(self.document)

    def __call__(
        self,
        task: Any = None,
        *,
        invocation_state: dict[str, Any] | None = None,
        force_resume: bool = False,
        resume_unfinished: bool = False,
    ) -> MultiAgentResult:
        """Run (or resume) and wait for the result; works inside a running event loop too."""
        return run_sync(
            self.invoke_async,
            task,
            invocation_state=invocation_state,
            force_resume=force_resume,
            resume_unfinished=resume_unfinished,
        )

    async def invoke_async(
        self,
        task: Any = None,
        *,
        invocation_state: dict[str, Any] | None = None,
        force_resume: bool = False,
        resume_unfinished: bool = False,
        fresh: bool = False,
    ) -> MultiAgentResult:
        """Run (or resume) and return the result.

        Args:
            task: the task (text or content blocks); interrupt responses to answer an interrupted run; or
                None to resume an unfinished run.
            invocation_state: a dict shared by reference with every node, condition, hook and tool.
            force_resume: resume a saved run even though the graph's nodes or edges changed since.
            resume_unfinished: when the last run did not finish, resume it even if ``task`` differs (the
                new task is ignored) instead of raising ``RunError``.
            fresh: start a new run of ``task`` even if the last one did not finish (it is not resumed;
                its saved records stay in the session's journal).
        """
        with Exclusive(self.kind, self.id, self._invoking):
            options = RunOptions(force_resume, resume_unfinished, fresh)
            return await self._invoke(
                task, {} if invocation_state is None else invocation_state, None, options
            )

    async def stream_async(
        self,
        task: Any = None,
        *,
        invocation_state: dict[str, Any] | None = None,
        force_resume: bool = False,
        resume_unfinished: bool = False,
        fresh: bool = False,
    ) -> AsyncGenerator[MultiAgentStreamEvent, None]:
        """Run (or resume), yielding node start/stream/stop events, handoffs, and the result last.

        Consume the stream to the end, or close it (``aclosing``, ``aclose()``): a stream closed early
        stops the run, which is saved as interrupted and resumes from there. Always close a stream you
        leave early; one merely dropped after a ``break`` runs on until it is garbage collected.
        """
        state = {} if invocation_state is None else invocation_state
        options = RunOptions(force_resume, resume_unfinished, fresh)
        with Exclusive(self.kind, self.id, self._invoking):
            # The task group lives in this generator's own body: closing the generator (GeneratorExit at
            # its yield) cancels it in the task that entered it.
            send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=1024)
            failure: list[Exception] = []

            async def produce() -> None:
                async with send:
                    try:
                        result = await self._invoke(task, state, send.send, options)
                    except Exception as exc:
                        failure.append(exc)  # raised below as it is, not wrapped in an ExceptionGroup
                        return
                    await send.send(MultiAgentResultEvent(result))

            closed = False
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(produce)
                    async with receive:
                        try:
                            async for event in receive:
                                yield event
                        except GeneratorExit:
                            # Closed early (aclose, aclosing): stop the run, which saves it as
                            # interrupted (resumable), and leave the task group normally.
                            closed = True
                            group.cancel_scope.cancel()
            except BaseExceptionGroup as group_error:
                raise unwrap_group(group_error) from None
            if closed:
                raise GeneratorExit
            if failure:
                raise failure[0]

    async def _invoke(
        self, task: Any, invocation_state: dict[str, Any], emit: Emit | None, options: RunOptions
    ) -> MultiAgentResult:
        if self.memory is not None:
            invocation_state.setdefault("memory", self.memory)
        await self.hooks.invoke(BeforeMultiAgentInvocation(self, invocation_state))
        self.run_options = options  # nested orchestrators run with the same options (force_resume)
        responses: dict[str, Any] = {}
        resumed = self.status in _UNFINISHED
        if options.fresh and task is not None and not is_interrupt_responses(task):
            resumed = False  # asked for: the unfinished run is left as it was saved
        if resumed and self.session_manager is None and task is not None and not is_interrupt_responses(task):
            # Nothing is persisted, so nothing needs protecting: a new task starts a fresh run. Resuming
            # in memory is an explicit call without a task.
            resumed = False
        if is_interrupt_responses(task) or (task is None and self.status == Status.INTERRUPTED):
            if self.status != Status.INTERRUPTED:
                raise RunError(
                    f"{self.kind} {self.id!r} got interrupt responses but its run is not interrupted"
                )
            given = interrupt_responses(task) if task is not None else {}
            responses = collect_answers(self.document, f"{self.kind} {self.id!r}", given)
            if self.run["interrupts"]:
                # Questions are still open: the run stays interrupted, the answers so far are kept.
                result = self.build_result()
                result.invocation_state = invocation_state
                await self.hooks.invoke(AfterMultiAgentInvocation(self, invocation_state, result))
                return result
        elif resumed and task is not None and task != self.document.field("task"):
            if options.resume_unfinished:
                task = None
            else:
                raise RunError(
                    f"{self.kind} {self.id!r} has an unfinished run ({self.status.value}) of another task; resume "
                    "it by invoking with no task (orchestra resume), or delete the session to start over"
                )
        if resumed:
            self.migrate(options.force_resume)
            # A wait's answer is kept while the run goes on: a node that waits twice runs again from its
            # start after the second wait, and its first wait must still find its answer.
            if not responses:  # a run killed after a wait was answered: its answer still holds
                responses = dict(self.run.get("answers") or {})
            kept = {i: answer for i, answer in responses.items() if is_wait_answer(answer)}
            self.document.update_run(
                status=Status.EXECUTING.value, reason=None, error=None, interrupts=[], answers=kept
            )
        else:
            if task is None:
                raise RunError(f"{self.kind} {self.id!r} has no run to resume: give it a task")
            self.start_fresh(task)
        context = {"orchestrator": self.id, "run_id": self.run.get("run_id")}
        if self.session_manager is not None:
            context["session_id"] = self.session_manager.session_id
        # Every log line of the run (its nodes and agents included) carries these ids.
        with structlog.contextvars.bound_contextvars(**context):
            self.resumed = resumed
            if not tracing.recording():
                return await self._run_logged(invocation_state, emit, responses)
            attributes = {
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.workflow.name": self.id,
                "orchestra.run.kind": self.kind,
                "orchestra.run.id": self.id,
                "orchestra.run.resumed": resumed,
            }
            with tracing.span(f"invoke_workflow {self.id}", attributes) as run_span:
                result = await self._run_logged(invocation_state, emit, responses)
                run_span.set(orchestra__run__status=result.status.value)
                run_span.usage(result.usage)
                if result.status.value == "failed":
                    run_span.fail(description=result.reason)
                return result

    async def _run_logged(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any]
    ) -> MultiAgentResult:
        self.log.info("run.start", kind=self.kind, resumed=self.resumed)
        self._invocation_state = invocation_state
        self._base_ms = float(self.run["execution_time_ms"])
        self._started_at = time.perf_counter()
        if self._meter is None and self.metered():
            self._meter = Meter(self)
        if self._meter is not None:
            self._meter.start()
        if self.budget is not None:  # the limits in effect (a resume may have raised them)
            limits = self.budget.to_json()
            limits.pop("prices", None)
            self.document.update_run(budget=limits)
        try:
            return await self._run_timed(invocation_state, emit, responses)
        finally:
            self._started_at = None

    async def _run_timed(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any]
    ) -> MultiAgentResult:
        try:
            try:
                result = await self._run(invocation_state, emit, responses)
            except BaseExceptionGroup as group:
                # Documented errors surface as themselves, never wrapped by a task group.
                raise unwrap_group(group) from None
        except anyio.get_cancelled_exc_class():
            # Cancelled from outside (Ctrl-C, SIGTERM, a task timeout): save the run as interrupted so it
            # can be resumed; the nodes that were running run again from their state before they started.
            with anyio.CancelScope(shield=True):
                await self._stop_interrupted(invocation_state)
            self.log.info("run.end", status=Status.INTERRUPTED.value, reason="cancelled")
            raise
        self.document.update_run(execution_time_ms=self.elapsed_ms())
        result.execution_time_ms = self.run["execution_time_ms"]
        result.resumed = self.resumed
        result.invocation_state = invocation_state
        await self.hooks.invoke(AfterMultiAgentInvocation(self, invocation_state, result))
        self.log.info("run.end", status=result.status.value, reason=result.reason)
        return result

    async def _stop_interrupted(self, invocation_state: dict[str, Any]) -> None:
        self.document.update_run(
            status=Status.INTERRUPTED.value,
            reason="the run was cancelled (for example by Ctrl-C or SIGTERM)",
            error=None,
            interrupts=[],
            execution_time_ms=self.elapsed_ms(),
        )
        result = self.build_result()
        result.invocation_state = invocation_state
        await self.hooks.invoke(AfterMultiAgentInvocation(self, invocation_state, result))

    async def _run(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any]
    ) -> MultiAgentResult:
        raise NotImplementedError
