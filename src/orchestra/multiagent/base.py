"""What Graph and Swarm share: nodes, shared state, hooks, sessions, sync and stream facades, fresh runs
and resumes (versions, migrations, the topology check), budgets, interrupts and the save lock.

The run's state is its *document* (``RunDocument``, in ``_run_document.py``, which says what it holds).
"""

from __future__ import annotations

import copy
import hashlib
import json
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Self

import anyio
import structlog

from orchestra import tracing
from orchestra._concurrency import unwrap_group
from orchestra._ids import validate_id
from orchestra._logging import get_logger
from orchestra._sync import run_sync
from orchestra.agent.state import JSONState
from orchestra.budget import Budget, Spent, exceeded
from orchestra.errors import BudgetExceededError, ConcurrencyError, ConfigurationError, RunError
from orchestra.hooks import HookProvider, HookRegistry, OrchestratorSessionManager
from orchestra.interrupts import Interrupt, interrupt_responses, is_interrupt_responses
from orchestra.messages import Usage
from orchestra.multiagent import migrations as _migrations
from orchestra.multiagent._metering import Meter
from orchestra.multiagent._orchestrator import RunOptions
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent.events import (
    AfterMultiAgentInvocation,
    AfterNodeCall,
    BeforeMultiAgentInvocation,
    MultiAgentInitialized,
    MultiAgentResultEvent,
    MultiAgentStreamEvent,
)
from orchestra.multiagent.nodes import Emit, Node, NodeInput
from orchestra.multiagent.results import MultiAgentResult, NodeResult, Status
from orchestra.retry import (
    DEFAULT_RETRY,
    RetryPolicy,
    attempt_note,
    describe_failure,
    run_with_retries,
)

__all__ = ["MultiAgentBase", "configure_nodes"]

_UNFINISHED = (Status.EXECUTING, Status.FAILED, Status.INTERRUPTED)


class MultiAgentBase(RunDocument):
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
    ) -> None:
        self.id = validate_id(id, "orchestrator id")
        self.budget = budget
        """What a run may spend (see ``orchestra.multiagent.budget``); may be changed between invocations."""
        self.version = version
        """The user's name for this version of the pipeline, recorded in every run it starts."""
        self.migrations: dict[str, _migrations.Migration] = dict(migrations or {})
        """``{saved version: fn}``: how runs saved on an older version are carried over (see migrations.py)."""
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
        locks and the run document (see ``_copy_for_run``)."""
        self.state = JSONState(self._initial_state, owner=f"{self.kind} {self.id!r} state")
        self._invoking = threading.Lock()
        self._run_options = RunOptions()
        self._sync_nodes = anyio.Lock()  # sync function nodes run one at a time (see Node._run_function)
        self._blank_document(self._new_run_record(Status.PENDING))
        # Saves come from the run loop and, in the middle of a node, from map items, retried attempts
        # and model calls under a budget: one at a time, so the journal sees one writer.
        self._saving = anyio.Lock()
        self._meter: Meter | None = None
        self._invocation_state: dict[str, Any] = {}
        self._started_at: float | None = None  # perf_counter() when this invocation started running
        self._base_ms = 0.0  # the run's execution time before this invocation

    def _copy_for_run(self) -> Self:
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

    # -- the run document (the rest is RunDocument's) -----------------------------------------------------

    def _new_run_record(self, status: Status) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "status": status.value,
            "topology": self.topology_hash(),
            "version": self.version,
            "execution_count": 0,
            "usage": Usage().model_dump(by_alias=True),
            "reason": None,
            "error": None,
            "interrupts": [],
            "execution_time_ms": 0.0,
            "run_id": None,
            "answers": {},
        }

    async def _after_node(self, event: AfterNodeCall) -> None:
        """Run the AfterNodeCall hooks (the session saves there), one save at a time."""
        if not self.hooks.has_callbacks(AfterNodeCall):
            return  # nothing listens (no session manager, no hook): per node, nothing to pay for
        async with self._saving:
            if self._started_at is not None:
                self._update_run(execution_time_ms=self._elapsed_ms())
            await self.hooks.invoke(event)

    async def _node_attempts(
        self,
        node_id: str,
        node_input: NodeInput,
        call: Callable[[], Awaitable[NodeResult]],
        node_timeout: float | None,
        what: str,
    ) -> NodeResult:
        """Run a node by its retry policy: each failed attempt recorded and saved before its wait; a
        final failure a FAILED result, a budget reached an INTERRUPTED one (the reason in ``error``)."""
        policy = self.nodes[node_id].retry or DEFAULT_RETRY

        async def attempt(number: int) -> NodeResult:
            node_input.attempt = number
            if node_timeout is None:  # no cancel scope on the common path
                return await call()
            with anyio.fail_after(node_timeout):
                return await call()

        async def failed(number: int, error: BaseException, wait: float) -> None:
            self._record_attempt(node_id, number, describe_failure(error, node_timeout, what), wait)
            await self._save_progress(node_id)

        try:
            return await run_with_retries(policy, len(self._attempts(node_id)) + 1, attempt, failed)
        except BudgetExceededError as exc:
            return NodeResult(node_id=node_id, status=Status.INTERRUPTED, error=str(exc))
        except Exception as exc:
            error = describe_failure(exc, node_timeout, what) + attempt_note(node_input.attempt, policy)
            return NodeResult(node_id=node_id, status=Status.FAILED, error=error)

    async def _save_progress(self, node_id: str, result: NodeResult | None = None) -> None:
        """Save in the middle of a node (``AfterNodeCall`` with ``partial=True``): a map item finished,
        an attempt failed and will be retried, a model call was charged to a budget."""
        if not self.hooks.has_callbacks(AfterNodeCall):
            return
        result = result or NodeResult(node_id=node_id, status=Status.EXECUTING)
        await self._after_node(AfterNodeCall(self, node_id, self._invocation_state, result, partial=True))

    def _elapsed_ms(self) -> float:
        """The run's execution time so far, this invocation included (across resumes)."""
        if self._started_at is None:
            return float(self.run["execution_time_ms"])
        return self._base_ms + (time.perf_counter() - self._started_at) * 1000

    def as_tool(self, name: str | None = None, description: str | None = None) -> Any:
        """This Graph or Swarm as a tool an agent's model can call (``{"input": "..."}`` -> the run's
        output). Each call is a fresh run with the caller's invocation state; a run that does not complete
        is an error result naming why."""
        from orchestra.tools.delegate import DelegateTool

        return DelegateTool(self, name, description)

    def _start_fresh_document(self, task: Any, run_id: str | None = None) -> None:
        """Reset the run document, the shared state and every agent node for a new run."""
        self._unset.update(name for name in self._fields if name != "run")
        self._fields = {"run": self._new_run_record(Status.EXECUTING)}
        self._update_run(run_id=run_id or secrets.token_hex(8))
        self._set("task", task)
        # Unchanged from one run to the next, so the journal writes it once per session, not per run.
        self._set("topology", self._topology())
        for name in self._logs:
            self._logs[name] = []
            self._dirty_logs.add(name)
        self.state.replace(self._initial_state)
        # Agents used as tools keep their conversation from run to run (as they do within a process).
        for node_id, node in self.nodes.items():
            node.reset()
            if node.kind == "agent":
                self._mark_agent(node_id)

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

    # -- topology -------------------------------------------------------------------------------------

    def _topology(self, legacy: bool = False) -> dict[str, Any]:
        return {"kind": self.kind, "nodes": {n: node.kind for n, node in sorted(self.nodes.items())}}

    def topology_hash(self) -> str:
        """A hash of the nodes and edges: a run saved with another topology is not resumed silently."""
        cached: str | None = self.__dict__.get("_topology_hash")
        if cached is None:  # nodes and edges are fixed once built; every fresh run record needs the hash
            text = json.dumps(self._topology(), sort_keys=True)
            cached = self.__dict__["_topology_hash"] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return cached

    def _legacy_topology_hash(self) -> str:
        """The hash versions before 0.2 saved (no join modes, conditions only as present or not)."""
        text = json.dumps(self._topology(legacy=True), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def same_topology(self, saved: str | None) -> bool:
        """Whether a saved run's topology hash is this orchestrator's (a run saved by an earlier version
        with the older, coarser hash is accepted when that hash matches)."""
        return saved in (self.topology_hash(), self._legacy_topology_hash())

    # -- versions and migrations ----------------------------------------------------------------------

    def _carry_over(self, force: bool) -> None:
        """Before a resume: migrate a run saved on another version, or refuse one saved by another graph
        (naming what changed) unless ``force`` (see ``orchestra.multiagent.migrations``)."""
        what = f"{self.kind} {self.id!r}"
        saved = self.run.get("version")
        if saved != self.version and saved in self.migrations:
            fields, logs = self._whole_document()
            fields, logs, applied = _migrations.migrate_document(
                fields, logs, self.migrations, self.version, what
            )
            self._take_migrated(fields, logs)
            self.log.info("run.migrated", steps=applied)
            self._update_run(
                topology=self.topology_hash(),
                migrations=[*(self.run.get("migrations") or []), *applied],
            )
            self._set("topology", self._topology())
            stale = sorted(
                name[len("node/") :]
                for name in self._fields
                if name.startswith("node/") and name[len("node/") :] not in self.nodes
            )
            if stale:
                raise RunError(
                    f"{what}: after the migration from version {saved!r} the run still has nodes the graph "
                    f"does not: {', '.join(stale)}; rename or remove them in the migration "
                    "(run.rename_node(old, new), run.remove_node(id))"
                )
            return
        if self.same_topology(self.run.get("topology")) or force:
            return
        changes = _migrations.describe_changes(self._fields.get("topology"), self._topology())
        hint = (
            f"register a migration for version {saved!r} (migrations={{{saved!r}: fn}}, YAML migrations:)"
            if saved is not None
            else "give the graph a version= and register migrations for the next change"
        )
        raise RunError(
            f"{what}: the saved run was made by a different graph ({'; '.join(changes)}); resuming could "
            f"skip or repeat the wrong nodes. To carry it over, {hint}; or pass force_resume=True "
            "(orchestra resume --force) to resume anyway, or delete the session to start over"
        )

    def _whole_document(self) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """The run document as saved, agents' state and the orphans of a changed graph included."""
        fields = {**self._orphans[0], **copy.deepcopy(self._fields), "state": self.state.to_dict()}
        logs = {**self._orphans[1], **{k: list(v) for k, v in self._logs.items()}}
        for node_id, node in self.nodes.items():
            # Only the agents the saved run has: a node new in this graph has nothing saved (and a
            # migration may give it the saved agent of a renamed one).
            if node.kind == "agent" and (
                node_id in self._restored_agents or f"node/{node_id}" in self._fields
            ):
                agent_fields, messages = self._agent_fields(node_id)
                fields[f"agent/{node_id}"] = agent_fields
                logs[f"agent/{node_id}/messages"] = list(messages)
        return fields, logs

    def _take_migrated(self, fields: dict[str, Any], logs: dict[str, list[Any]]) -> None:
        """Load a migrated document; everything in it is saved with the next save (the journal writes
        only what differs from what it holds)."""
        before = set(self._fields) | set(self._orphans[0])
        orphan_logs = set(self._orphans[1])
        self.load_document(fields, logs)
        self._dirty.update(self._fields)
        self._dirty_logs.update(self._logs)
        self._dirty_agents.update(n for n, node in self.nodes.items() if node.kind == "agent")
        self._unset.update(name for name in before if name not in fields)
        for name in orphan_logs:
            if name not in logs:  # a renamed or removed agent's conversation: emptied in storage too
                self._logs[name] = []
                self._dirty_logs.add(name)
        self._saved_state_version = -1

    # -- budgets and retries --------------------------------------------------------------------------

    def _metered(self) -> bool:
        """Whether this run counts its spending: it has a budget, or one of its agents has."""
        return self.budget is not None or any(node.budget is not None for node in self.nodes.values())

    def _budget_stop(self, node_id: str | None = None) -> BudgetExceededError | None:
        """The error to stop with before a node starts if the run (or that node) spent its budget."""
        if self.budget is not None:
            spent = Spent.from_json(self.run.get("spent"))
            scope = f"run of {self.kind} {self.id!r}"
            error = exceeded(self.budget, spent, self._elapsed_ms() / 1000, scope)
            if error is not None:
                return error
        node = self.nodes.get(node_id) if node_id is not None else None
        if node is not None and node.budget is not None:
            record = self._fields.get(f"node/{node_id}") or {}
            return exceeded(node.budget, Spent.from_json(record.get("spent")), 0.0, f"agent {node_id!r}")
        return None

    # -- invocation -----------------------------------------------------------------------------------

    def _open_interrupt_ids(self) -> set[str]:
        """The interrupts this run waits on (asked, whether answered yet or not)."""
        if self.status != Status.INTERRUPTED:
            return set()
        return {i["id"] for i in self.run.get("interrupts", [])} | set(self.run.get("answers") or {})

    def _collect_answers(self, new: Mapping[str, Any]) -> dict[str, Any]:
        """Record answers to open interrupts (in any order, over any number of invocations).

        The run record keeps the questions still open (``interrupts``) and the answers given so far
        (``answers``); returns every answer once no question is open.
        """
        answers = dict(self.run.get("answers") or {})
        asked = {i["id"] for i in self.run["interrupts"]} | set(answers)
        unknown = sorted(set(new) - asked)
        if unknown:
            raise RunError(
                f"{self.kind} {self.id!r} has no open interrupt {unknown[0]!r}; its open interrupts: "
                f"{', '.join(sorted(asked)) or 'none'}"
            )
        answers.update(new)
        still_open = [i for i in self.run["interrupts"] if i["id"] not in answers]
        self._update_run(interrupts=still_open, answers=answers)
        return answers

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
        with self._exclusive():
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
        with self._exclusive():
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

    def _exclusive(self) -> _Exclusive:
        return _Exclusive(self)

    async def _invoke(
        self, task: Any, invocation_state: dict[str, Any], emit: Emit | None, options: RunOptions
    ) -> MultiAgentResult:
        await self.hooks.invoke(BeforeMultiAgentInvocation(self, invocation_state))
        self._run_options = options  # nested orchestrators run with the same options (force_resume)
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
            responses = self._collect_answers(interrupt_responses(task) if task is not None else {})
            if self.run["interrupts"]:
                # Questions are still open: the run stays interrupted, the answers so far are kept.
                result = self._build_result()
                result.invocation_state = invocation_state
                await self.hooks.invoke(AfterMultiAgentInvocation(self, invocation_state, result))
                return result
        elif resumed and task is not None and task != self._fields.get("task"):
            if options.resume_unfinished:
                task = None
            else:
                raise RunError(
                    f"{self.kind} {self.id!r} has an unfinished run ({self.status.value}) of another task; resume "
                    "it by invoking with no task (orchestra resume), or delete the session to start over"
                )
        if resumed:
            self._carry_over(options.force_resume)
            self._update_run(
                status=Status.EXECUTING.value, reason=None, error=None, interrupts=[], answers={}
            )
        else:
            if task is None:
                raise RunError(f"{self.kind} {self.id!r} has no run to resume: give it a task")
            self._start_fresh_document(task)
        context = {"orchestrator": self.id, "run_id": self.run.get("run_id")}
        if self.session_manager is not None:
            context["session_id"] = self.session_manager.session_id
        # Every log line of the run (its nodes and agents included) carries these ids.
        with structlog.contextvars.bound_contextvars(**context):
            attributes = {
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.workflow.name": self.id,
                "orchestra.run.kind": self.kind,
                "orchestra.run.id": self.id,
                "orchestra.run.resumed": resumed,
            }
            self._resumed_run = resumed
            with tracing.span(f"invoke_workflow {self.id}", attributes) as run_span:
                result = await self._run_logged(invocation_state, emit, responses, resumed)
                run_span.set(orchestra__run__status=result.status.value)
                run_span.usage(result.usage)
                if result.status.value == "failed":
                    run_span.fail(description=result.reason)
                return result

    async def _run_logged(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any], resumed: bool
    ) -> MultiAgentResult:
        self.log.info("run.start", kind=self.kind, resumed=resumed)
        self._invocation_state = invocation_state
        self._base_ms = float(self.run["execution_time_ms"])
        self._started_at = time.perf_counter()
        if self._meter is None and self._metered():
            self._meter = Meter(self)
        if self._meter is not None:
            self._meter.start()
        if self.budget is not None:  # the limits in effect (a resume may have raised them)
            limits = self.budget.to_json()
            limits.pop("prices", None)
            self._update_run(budget=limits)
        try:
            return await self._run_timed(invocation_state, emit, responses, resumed)
        finally:
            self._started_at = None

    async def _run_timed(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any], resumed: bool
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
        self._update_run(execution_time_ms=self._elapsed_ms())
        result.execution_time_ms = self.run["execution_time_ms"]
        result.resumed = resumed
        result.invocation_state = invocation_state
        await self.hooks.invoke(AfterMultiAgentInvocation(self, invocation_state, result))
        self.log.info("run.end", status=result.status.value, reason=result.reason)
        return result

    async def _stop_interrupted(self, invocation_state: dict[str, Any]) -> None:
        self._finish(Status.INTERRUPTED, "the run was cancelled (for example by Ctrl-C or SIGTERM)")
        self._update_run(execution_time_ms=self._elapsed_ms())
        result = self._build_result()
        result.invocation_state = invocation_state
        await self.hooks.invoke(AfterMultiAgentInvocation(self, invocation_state, result))

    def _build_result(self) -> MultiAgentResult:
        raise NotImplementedError

    def output_source(self) -> dict[str, Any] | None:
        """Which node gave the output of the run that just completed (see ``NodeResult.output_from``)."""
        raise NotImplementedError

    async def _run(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any]
    ) -> MultiAgentResult:
        raise NotImplementedError

    def _finish(
        self,
        status: Status,
        reason: str | None = None,
        error: str | None = None,
        interrupts: list[Interrupt] | None = None,
    ) -> None:
        self._update_run(
            status=status.value,
            reason=reason,
            error=error,
            interrupts=[i.model_dump(mode="json") for i in interrupts or []],
        )

    def _conclude(
        self,
        failure: tuple[str, str | None] | None,
        interrupts: list[Interrupt],
        stopped: str | None = None,
    ) -> None:
        """Record how the run ended: failed (``(reason, error)``), stopped by its budget (``stopped``: the
        reason; resumable), waiting on interrupts, or completed."""
        if failure is not None:
            self._finish(Status.FAILED, *failure)
        elif stopped is not None:
            self._finish(Status.INTERRUPTED, stopped, interrupts=interrupts)
        elif interrupts:
            self._finish(Status.INTERRUPTED, "waiting for interrupt responses", interrupts=interrupts)
        else:
            self._finish(Status.COMPLETED)

    def _add_usage(self, usage: Usage) -> None:
        # Plain arithmetic on the stored record (its keys are Usage's aliases): per node, three pydantic
        # round trips cost more than the rest of the bookkeeping.
        total = self.run["usage"]
        self._update_run(
            usage={
                "inputTokens": total.get("inputTokens", 0) + usage.input_tokens,
                "outputTokens": total.get("outputTokens", 0) + usage.output_tokens,
                "totalTokens": total.get("totalTokens", 0) + usage.total_tokens,
            }
        )


def configure_nodes(
    nodes: Mapping[str, Node],
    retry: RetryPolicy | Mapping[str, RetryPolicy] | None,
    budgets: Mapping[str, Budget] | None,
) -> None:
    """Give nodes the retry policies and budgets an orchestrator was built with.

    Raises:
        GraphError: a policy or budget names a node the orchestrator does not have.
    """
    from orchestra.errors import GraphError

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


class _Exclusive:
    def __init__(self, orchestrator: MultiAgentBase) -> None:
        self._orchestrator = orchestrator

    def __enter__(self) -> None:
        if not self._orchestrator._invoking.acquire(blocking=False):
            raise ConcurrencyError(
                f"{self._orchestrator.kind} {self._orchestrator.id!r} is already running; it runs one "
                "invocation at a time"
            )

    def __exit__(self, *exc_info: object) -> None:
        self._orchestrator._invoking.release()
