"""One run on this server, from its invocation to its final record.

``Executor.execute`` runs an invocation that holds its session (if it has one): build its target
(``building.py``), write its record ``executing`` while the session loads (a pipeline, or a resume) or
beside the agent's turn (``record_beside_turn``), run it within its stop's cancel scope with its events
going to its log (``run_target``), apply a stop the way its mode says (``stopping.py``), and fill in the
final record (``final_records.py``): a plain run's is queued for ``RunStore.flush`` after the answer, a
background run's is its caller's to write. A run that lost its session to a plain writer (409) and
held the busy document runs again. A request that runs again what an earlier one left undone first
checks, with the session loaded, that the earlier one did not store its turn after all (``already_done``).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio

from orchestra._concurrency import unwrap_group
from orchestra._logging import get_logger
from orchestra.agent import Agent
from orchestra.agent.result import ResultEvent
from orchestra.agent.state import JSONState
from orchestra.errors import OrchestraError, SessionConflictError
from orchestra.hosting.approvals import check_approval_answers
from orchestra.hosting.building import SERVER_COMPACTION, Builder
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.events import EventLog, stream_event
from orchestra.hosting.final_records import finish
from orchestra.hosting.interrupts import (
    ResponsesRefused,
    all_open,
    check_responses,
    close_asking,
    repeats_recorded_answers,
    response_blocks,
)
from orchestra.hosting.invocation import Invocation
from orchestra.hosting.outcomes import Failure, NothingToResume, recorded_failure, terminal_event
from orchestra.hosting.quotas import Quotas
from orchestra.hosting.records import RunRecord, RunStore
from orchestra.hosting.running import Running
from orchestra.hosting.session_outcome import close_resumed, settle_from_session
from orchestra.hosting.stopping import Stopped, settle_stop
from orchestra.hosting.stops import Stop, Stops
from orchestra.hosting.wait_index import note_waiting
from orchestra.hosting.workers import Workers, no_session
from orchestra.hosting.workspaces import Workspaces
from orchestra.multiagent import MultiAgentBase
from orchestra.multiagent.events import MultiAgentResultEvent
from orchestra.session import SnapshotSessionManager

__all__ = ["Executor", "RunOutcome", "record_beside_turn", "run_target"]

log = get_logger("orchestra.server")

RunOutcome = tuple[RunRecord, Failure | None]
"""A run's final record, and how its failure is answered (None: 200 with the record's answer)."""

_CONFLICT_RETRIES = 5  # times a background run runs again after losing its session to a plain writer


class Executor:
    """Runs invocations on this server (see the module docstring)."""

    def __init__(
        self, config: ServerConfig, workspaces: Workspaces, running: Running, stops: Stops, builder: Builder
    ) -> None:
        self.config = config
        self.workspaces = workspaces
        self.running = running
        self.stops = stops
        self.builder = builder
        self.quotas: Quotas | None = None  # counts the runs' model calls when quotas are configured
        self.workers = Workers(config)

    def on_workers(self, invocation: Invocation) -> bool:
        """Whether the run goes to the Temporal workers: moved there, or its pipeline runs there."""
        return invocation.on_workers or self.config.on_workers(invocation.hosted)

    def record_of(self, invocation: Invocation) -> RunRecord:
        """A new run record for ``invocation`` (``executing`` on this server)."""
        extra: dict[str, Any] = {}  # only what is set: a plain turn builds the record it always did
        if invocation.responses:
            extra["responses"] = [{"interrupt_id": i, "response": r} for i, r in invocation.responses.items()]
        if invocation.on_busy != "reject":
            extra["on_busy"] = invocation.on_busy
        if invocation.background:
            extra["background"] = True
        if invocation.webhook:
            extra["webhook"] = invocation.webhook
        if invocation.resume:
            extra["resume"] = True
        if invocation.metadata:
            extra["metadata"] = dict(invocation.metadata)
        if invocation.owner is not None:
            extra["owner"] = invocation.owner
        extra["memory_subject"] = invocation.subject  # always: a record without it predates it (of_record)
        if self.on_workers(invocation):
            extra["workflow_id"] = self.workers.workflow_of(invocation)
        return RunRecord(
            run_id=invocation.run_id,
            agent_id=invocation.hosted.id,
            kind=self.config.spec_of(invocation.hosted.id).spec.kind,
            mode=invocation.mode,
            session_id=invocation.session_id,
            started_at=datetime.now(UTC).isoformat(),
            input=invocation.task,
            caller_history=len(invocation.history or []) if invocation.mode == "stateless" else 0,
            server=self.workspaces.liveness.server_id,
            **extra,
        )

    async def execute(
        self,
        workspace: str,
        invocation: Invocation,
        log: EventLog | None = None,
        record: RunRecord | None = None,
    ) -> RunOutcome:
        """Run an invocation that holds its session (if it has one) to its final record. A background
        run's record is the caller's to write; a plain one's is queued for ``RunStore.flush``."""
        record = record or self.record_of(invocation)
        stoppable = invocation.session_id is not None or invocation.background
        storage = self.workspaces.storage(workspace)
        metered = self.quotas.metering(workspace, invocation.owner) if self.quotas is not None else None
        with self.running.run(record.run_id, log):
            stop = self.stops.register(record.run_id, storage, stoppable=stoppable)
            try:
                if log is None:  # a plain invoke keeps no events: no writer, no task group
                    return await self._turn(workspace, invocation, record, stop, log)
                async with anyio.create_task_group() as group:
                    group.start_soon(log.run_writer)
                    result = await self._turn(workspace, invocation, record, stop, log)
                    log.append(*terminal_event(*result))
                    await log.close()  # the writer ends once every event is written
                return result
            except BaseExceptionGroup as group_error:
                raise unwrap_group(group_error) from None
            finally:
                if metered is not None:
                    metered.var.reset(metered)
                self.stops.unregister(stop)
                if stop.request is not None:  # answered: the request goes (a sweep clears late ones)
                    with anyio.CancelScope(shield=True):
                        await self.stops.clear(storage, record.run_id)

    async def _turn(
        self, workspace: str, invocation: Invocation, record: RunRecord, stop: Stop, log: EventLog | None
    ) -> RunOutcome:
        """Build, check, run and record the invocation (``execute`` without its bookkeeping)."""
        runs = self.workspaces.runs(workspace)
        started = time.perf_counter()
        target: Agent | MultiAgentBase | None = None
        outcome: Any
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                target = await self._build_and_record(invocation, record, runs)
                if self.quotas is not None:
                    self.quotas.attach(target)
                replay = await self.already_done(workspace, invocation, record)
                if replay is not None:
                    return replay
                if (
                    invocation.responses is not None
                    and not all_open(target, invocation.responses)
                    and not repeats_recorded_answers(target, invocation.responses)
                ):
                    # Only a refusal needs the earlier runs: were these answered already, and by which?
                    earlier = await self._answered_earlier(runs, invocation)
                    check_responses(target, invocation.responses, earlier)
                if invocation.responses is not None:
                    check_approval_answers(target, invocation.responses)
                task = self.builder.task(invocation, target)
                memory = self.workspaces.memory.binding(workspace, invocation.subject)
                turn = functools.partial(run_target, target, invocation, task, stop, log, memory)
                if record.workflow_id is not None:
                    if invocation.session_id is None:
                        raise no_session(invocation.hosted.id)
                    assert isinstance(target, MultiAgentBase)
                    storage = self.workspaces.agent_storage(workspace, invocation.hosted.id)
                    turn = functools.partial(
                        self.workers.run, workspace, target, invocation, record, task, stop, log, storage
                    )
                if self._records_beside(invocation, target):  # its record is written beside the turn
                    assert isinstance(target, Agent)
                    outcome = await record_beside_turn(record, runs, target, turn)
                else:
                    outcome = await turn()
            except Exception as exc:
                outcome = exc
            # A run that held the busy document and lost its session to a plain writer stored nothing: it
            # runs again (a plain one answers 409, as it always did).
            lost = isinstance(outcome, SessionConflictError) and not invocation.held_here
            if not lost or attempt == _CONFLICT_RETRIES or stop.request is not None:
                break
            if log is not None:
                log.append(
                    "status", {"status": "executing", "again": "another writer saved the session first"}
                )
            await anyio.sleep(0.2 * 2**attempt)
        self.stops.unregister(stop)  # from here on, the outcome is decided: a stop request is too late
        if isinstance(outcome, Stopped) and record.workflow_id is None:  # (workers.py settles its own)
            storage = self.workspaces.agent_storage(workspace, invocation.hosted.id)
            try:
                outcome = await settle_stop(outcome, target, invocation, record, storage, SERVER_COMPACTION)
            except OrchestraError as exc:  # it read or changed the session half way: say so
                outcome.stored = None
                outcome.note = f"what the stop left in the session is not known: {exc}"
        failure = finish(record, target, outcome, started)
        await note_waiting(self.workspaces.storage(workspace), record)  # before its final record
        if _leaves_no_record(invocation, target, outcome):
            await self.forget(runs, record)
        elif not invocation.background:
            runs.save_later(record)
        if invocation.responses or record.resumed:
            await _close_earlier(runs, record)
        self.builder.keep(workspace, invocation, target, outcome)
        return record, failure

    @staticmethod
    def _records_beside(invocation: Invocation, target: Agent | MultiAgentBase) -> bool:
        """A plain session turn of an agent: its record is written beside the turn (its session may need
        no load: a kept agent), not beside the load."""
        return (
            isinstance(target, Agent)
            and invocation.session_id is not None
            and not invocation.background
            and not invocation.resume
        )

    async def _build_and_record(
        self, invocation: Invocation, record: RunRecord, runs: RunStore
    ) -> Agent | MultiAgentBase:
        """Build the target (loading its session) and, in session mode, write the run record as "executing"
        meanwhile: a turn the session stores always has its record, even if this process dies right after
        the save (the record then stays "executing" until it is settled from the session). A background
        run's record is written before it starts; an agent's plain turn writes it beside the turn."""
        spec_kind = self.config.spec_of(invocation.hosted.id).spec.kind
        if invocation.session_id is None or invocation.background:
            return await self.builder.build(invocation)
        if spec_kind == "agent" and not invocation.resume:
            return await self.builder.build(invocation)  # its record is written beside its turn
        built: list[Agent | MultiAgentBase] = []

        async def build() -> None:
            built.append(await self.builder.build(invocation))

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(build)
                group.start_soon(runs.save, record)
        except BaseExceptionGroup as group_error:
            raise unwrap_group(group_error) from None
        return built[0]

    async def already_done(
        self, workspace: str, invocation: Invocation, record: RunRecord
    ) -> RunOutcome | None:
        """For a request that runs again what an earlier one left undone: with the session loaded (every
        later save is conditional on it), check that the earlier one did not store its turn after all."""
        prior = invocation.prior
        if prior is None or invocation.mode != "session":
            return None
        settled = await settle_from_session(
            self.config,
            self.workspaces.agent_storage(workspace, prior.agent_id),
            prior,
            "a repeated request found it unfinished",
        )
        if settled.stored is not True or settled.needs_resume:
            return None  # nothing stored (run it), or its turn left open (running it again finishes it)
        if invocation.idempotency_key is not None:
            keys = self.workspaces.keys(workspace)
            entry = await keys.read(invocation.hosted.id, invocation.idempotency_key)
            if entry is not None:  # the key names the run that stored the turn again
                await keys.take_over(invocation.hosted.id, invocation.idempotency_key, entry, prior.run_id)
        runs = self.workspaces.runs(workspace)
        await runs.save(settled)
        if prior.run_id != record.run_id:
            await self.forget(runs, record)
        return settled, recorded_failure(settled)

    async def forget(self, runs: RunStore, record: RunRecord) -> None:
        """Delete the ``executing`` record of a turn that stored nothing (logged if that fails: the record
        is then settled as failed when read)."""
        if record.mode != "session" or record.background:
            return
        try:
            await runs.delete(record)
        except OrchestraError as exc:
            log.warning("run_record_not_deleted", run_id=record.run_id, error=str(exc))

    @staticmethod
    async def _answered_earlier(runs: RunStore, invocation: Invocation) -> dict[str, str]:
        """Interrupt ids the session's earlier runs answered, and by which run (for a clear 409)."""
        records = await runs.list([invocation.hosted.id], invocation.session_id, 50)
        return {
            answer["interrupt_id"]: record.run_id
            for record in records
            if record.run_id != invocation.run_id and record.status != "failed"
            for answer in record.responses
        }


async def _close_earlier(runs: RunStore, record: RunRecord) -> None:
    """The runs whose interrupts this one answered, or whose open turn it finished, are closed
    (``interrupts.py``, ``session_outcome.py``); a failure is logged, never raised (the turn is stored): a
    read of a run left waiting closes it later."""
    try:
        await close_asking(runs, record)
        await close_resumed(runs, record)
    except (OrchestraError, OSError) as exc:
        log.warning("answered_runs_not_closed", run_id=record.run_id, error=str(exc))


def _leaves_no_record(invocation: Invocation, target: Any, outcome: Any) -> bool:
    """A turn that never ran (its session did not load) or lost to another writer stored nothing: unless
    a repeat with its Idempotency-Key may ask for it, it leaves no run record."""
    never_ran = target is None or isinstance(
        outcome, SessionConflictError | ResponsesRefused | NothingToResume
    )
    return never_ran and isinstance(outcome, Exception) and invocation.idempotency_key is None


async def run_target(
    target: Agent | MultiAgentBase,
    invocation: Invocation,
    task: Any,
    stop: Stop,
    log: EventLog | None,
    memory: dict[str, Any] | None = None,
) -> Any:
    """Run ``target`` within ``stop``'s cancel scope; its outcome, or ``Stopped``. ``memory`` is the
    caller's memory binding, the run's invocation state (``WorkspaceMemory.binding``)."""
    prompt: Any = response_blocks(invocation.responses) if invocation.responses else task
    options: dict[str, Any] = {}
    if invocation.resume:  # POST .../sessions/{sid}/resume: finish what the session left open
        prompt = None
        _check_something_to_resume(target)
    if isinstance(target, Agent):
        stop.watch(target.messages)  # its turn so far is taken when a stop comes, before it unwinds
    elif not invocation.resume:
        options = {"resume_unfinished": True, "fresh": invocation.fresh and not invocation.responses}
    if memory is not None:
        options["invocation_state"] = dict(memory)
    with stop.scope():
        if log is None:
            return await target.invoke_async(prompt, **options)
        outcome: Any = None
        watch = _StateWatch(target.state, log)
        async for event in target.stream_async(prompt, **options):
            watch.check()
            if isinstance(event, ResultEvent | MultiAgentResultEvent):
                outcome = event.result
                continue
            converted = stream_event(event)
            if converted is not None:
                log.append(*converted)
        return outcome
    assert stop.request is not None
    return Stopped(stop.request, stop.partial)


class _StateWatch:
    """Sends a run's state (an agent's, a pipeline's shared state) as ``state`` events: as the run starts
    (unless empty), then whole after each change, checked as each of the run's events arrives."""

    def __init__(self, state: JSONState, log: EventLog) -> None:
        self.state = state
        self.log = log
        self.version = state.version
        self.sent = "{}"
        self.check(force=True)

    def check(self, *, force: bool = False) -> None:
        if self.state.version == self.version and not force:
            return
        self.version = self.state.version
        now = self.state.to_dict()
        text = json.dumps(now, sort_keys=True)  # as JSON: 1 and true differ
        if text != self.sent:
            self.sent = text
            self.log.append("state", now)


def _check_something_to_resume(target: Agent | MultiAgentBase) -> None:
    """An agent's open turn (cut by a crash), or a pipeline's unfinished run; else ``NothingToResume``."""
    if isinstance(target, Agent):
        if target.open_turn() is None:
            raise NothingToResume("the session has no open turn to resume: send a message instead")
    elif target.status.value not in ("executing", "failed", "interrupted"):
        raise NothingToResume("the session has no unfinished run to resume: send a task instead")


async def record_beside_turn(
    record: RunRecord, runs: RunStore, agent: Agent, turn: Callable[[], Awaitable[Any]]
) -> Any:
    """Run an agent's turn while its run record is written as "executing" beside it: the turn's save
    waits for the record (``before_save``), so a turn the session stores always has its record, and with
    a real model the write costs the turn nothing."""
    manager = agent.session_manager
    assert isinstance(manager, SnapshotSessionManager)
    written = anyio.Event()
    errors: list[Exception] = []

    async def write_executing() -> None:
        try:
            await runs.save(record)
        except Exception as exc:
            errors.append(exc)
        finally:
            written.set()

    async def before_save() -> None:
        await written.wait()
        if errors:
            raise errors[0]

    manager.before_save = before_save
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(write_executing)
            result = await turn()
    except BaseExceptionGroup as group_error:
        raise unwrap_group(group_error) from None
    finally:
        manager.before_save = None
    if errors and not isinstance(result, Stopped):
        raise errors[0]  # no save came to wait for it (the turn stored nothing): say why anyway
    return result
