"""Invoking hosted agents and pipelines in the three memory modes, one writer per session.

- **session** (``session_id``): the agent (or pipeline) is built fresh for the request and attached to a
  ``SnapshotSessionManager`` over the workspace's storage, which restores the whole conversation and
  saves the new turn. A pipeline whose last run in that session did not finish resumes it.
- **stateless** (``history``): the history is the agent's starting conversation (for a pipeline, it is
  put before the task as context); nothing is persisted.
- **none**: a fresh agent or pipeline, nothing persisted.

Within a process, invocations of one session run one after another in arrival order (a FIFO lock per
session). Across processes the storage's conditional writes decide: the writer that lost gets
``SessionConflictError``, which the API answers with 409 and ``Retry-After``.

Every run has a record (``runs.py``): written ``executing`` (durably) while the session loads, and final
after the answer. Each journal record the run writes carries its run id, so a record left ``executing``
by a server that died is settled from the session when it is next read (``settle.py``). A request with an
``Idempotency-Key`` is run once: a repeat is answered from the first run's record, waits for it, or runs
it again if it stored nothing (``idempotency.py``). How each outcome is answered is ``outcomes.py``.
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio

from orchestra import tracing
from orchestra._concurrency import unwrap_group
from orchestra._logging import get_logger
from orchestra.agent import Agent, AgentResult
from orchestra.agent.agent import deferred_initialization
from orchestra.agent.result import MessageEvent, ResultEvent, TextChunkEvent, ToolCallEvent, ToolResultEvent
from orchestra.errors import OrchestraError, SessionConflictError, SnapshotError
from orchestra.multiagent import Graph, MultiAgentBase, Swarm
from orchestra.multiagent.events import (
    HandoffEvent,
    MultiAgentResultEvent,
    NodeStartEvent,
    NodeStopEvent,
    NodeStreamEvent,
)
from orchestra.multiagent.results import MultiAgentResult, output_text
from orchestra.server.config import HostedSpec, ServerConfig
from orchestra.server.idempotency import IdempotencyKeys, KeyEntry, KeyRefused
from orchestra.server.liveness import Liveness
from orchestra.server.outcomes import Failure, NothingToResume, failure_of
from orchestra.server.runs import Mode, RunRecord, RunStore
from orchestra.server.session_cache import FreshAgents, SessionCache
from orchestra.server.settle import settle_from_session
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session._uuid7 import uuid7
from orchestra.spec import build
from orchestra.storage import LocalFileStorage, PrefixedStorage, Storage, storage_from_uri

__all__ = ["Invocation", "Runtime", "input_text"]

log = get_logger("orchestra.server")

_INPUT_KEYS = ("message", "prompt", "query", "input", "text", "task")
# Every request loads its session, so the server folds the journal often: a load reads at most 16 records.
SERVER_COMPACTION = Compaction(min_bytes=8 * 1024, ratio=2.0, max_records=16)
# A session's agent kept between turns reads its last record back before saving when idle this long.
CACHED_RECHECK_S = 1.0


def input_text(value: Any) -> str:
    """The task a request's ``input`` stands for: a string, the text under a usual key, or its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in _INPUT_KEYS:
            if isinstance(value.get(key), str):
                return str(value[key])
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:
            return strings[0]
    return json.dumps(value, sort_keys=True)


class Invocation:
    """One request to invoke a hosted agent."""

    def __init__(
        self,
        hosted: HostedSpec,
        task: str,
        session_id: str | None,
        history: list[dict[str, str]] | None,
    ) -> None:
        self.hosted = hosted
        self.task = task
        self.session_id = session_id
        self.history = history
        self.mode: Mode = "session" if session_id else "stateless" if history is not None else "none"
        self.run_id = str(uuid7())
        self.trace_headers: dict[str, str] = {}  # the request's traceparent/tracestate, if any
        self.idempotency_key: str | None = None
        self.fingerprint = ""  # of the request's body, which a repeat with the same key must match
        # Set when this request runs again what an earlier one with its key left undone.
        self.prior: RunRecord | None = None
        self.resume = False  # POST .../resume: finish what the session left open, with no new input
        # Answers to the session's open interrupts ({interrupt id: answer}); the protocol front doors
        # (A2A's input-required, an MCP tool call) set them instead of a new task.
        self.answers: dict[str, Any] | None = None

    def prompt(self) -> Any:
        """What the agent or pipeline is invoked with: the interrupt answers, or the task."""
        if self.answers:
            return [{"interruptResponse": {"interruptId": k, "response": v}} for k, v in self.answers.items()]
        return self.task

    def traced(self) -> Any:
        """The span of this invocation, continuing the caller's trace (``traceparent``) if it sent one."""
        attributes = {
            "orchestra.hosted.id": self.hosted.id,
            "orchestra.run.id": self.run_id,
            "orchestra.session.id": self.session_id,
            "orchestra.memory_mode": self.mode,
        }
        stack = contextlib.ExitStack()
        stack.enter_context(tracing.continued(self.trace_headers))
        stack.enter_context(
            tracing.span(f"invoke {self.hosted.id}", {k: v for k, v in attributes.items() if v})
        )
        return stack


def _history_messages(history: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"role": turn["role"], "content": [{"text": turn["content"]}]} for turn in history]


def _usage(usage: Any) -> dict[str, int]:
    return dict(usage.model_dump(by_alias=False))


class Runtime:
    """Builds and runs hosted agents and pipelines for the API (see the module docstring)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.root: Storage = storage_from_uri(config.storage)
        # Run records that need no fsync (see RunStore) go through the same files without it.
        self._unsynced_root: Storage = (
            LocalFileStorage(self.root.root, durable=False)
            if isinstance(self.root, LocalFileStorage)
            else self.root
        )
        self.liveness = Liveness(
            self._unsynced_root,
            every_s=config.runs.heartbeat_s,
            gone_after_s=config.runs.server_gone_after_s,
        )
        # Weak values: a session's lock lives while a turn holds it or waits on it, then goes away, so
        # the table holds the sessions being served now, not every session ever seen.
        self._locks: weakref.WeakValueDictionary[tuple[str, str, str], anyio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._runs: dict[str, RunStore] = {}
        self._running: dict[str, anyio.Event] = {}  # run id -> set when its final record is readable
        self.fresh = FreshAgents()
        self.sessions = SessionCache(
            config.limits.cached_sessions, int(config.limits.cached_session_mb * 2**20)
        )

    def storage(self, workspace: str) -> Storage:
        """The part of the storage that belongs to one workspace."""
        return PrefixedStorage(self.root, f"ws/{workspace}")

    def agent_storage(self, workspace: str, agent_id: str) -> Storage:
        """Where one hosted agent's sessions live: sessions are per agent, so one session id used with
        two agents gives two separate histories."""
        return PrefixedStorage(self.storage(workspace), f"agents/{agent_id}")

    def runs(self, workspace: str) -> RunStore:
        """The workspace's run records (one store per workspace: it holds the records not yet written)."""
        store = self._runs.get(workspace)
        if store is None:
            unsynced = PrefixedStorage(self._unsynced_root, f"ws/{workspace}")
            store = self._runs[workspace] = RunStore(self.storage(workspace), unsynced)
        return store

    def keys(self, workspace: str) -> IdempotencyKeys:
        """The workspace's idempotency keys."""
        return IdempotencyKeys(self.storage(workspace), self.config.runs.idempotency_ttl_s)

    async def flush_records(self, workspace: str) -> None:
        """Write the run records queued by finished invocations (after their answers were sent)."""
        await self.runs(workspace).flush()

    # -- reading runs ---------------------------------------------------------------------------------

    async def run_record(self, workspace: str, run_id: str) -> RunRecord | None:
        """A run's record, settled from its session if its server stopped before it was final."""
        record = await self.runs(workspace).get(run_id)
        return None if record is None else await self._settled(workspace, record)

    async def list_runs(
        self, workspace: str, agent_ids: list[str], session_id: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Run records, newest first (``RunStore.list``), each settled like ``run_record``."""
        records = await self.runs(workspace).list(agent_ids, session_id, limit)
        return [await self._settled(workspace, record) for record in records]

    async def _settled(self, workspace: str, record: RunRecord) -> RunRecord:
        why = await self._why_unsettled(record)
        if why is None:
            return record
        settled = await settle_from_session(
            self.config, self.agent_storage(workspace, record.agent_id), record, why
        )
        await self.runs(workspace).save(settled)
        return settled

    async def _why_unsettled(self, record: RunRecord) -> str | None:
        if record.settled is not None or record.agent_id not in self.config.loaded:
            return None
        if record.status == "executing":
            if record.run_id in self._running:
                return None
            if record.server == self.liveness.server_id:
                return "this server did not finish its record"
            if await self.liveness.is_alive(record.server):
                return None
            return "its server stopped before the run was recorded as finished"
        if record.stored is None and record.status == "failed" and record.mode == "session":
            return "the storage could not tell whether its turn was stored"
        return None

    # -- running --------------------------------------------------------------------------------------

    def _lock(self, workspace: str, agent_id: str, session_id: str) -> anyio.Lock:
        key = (workspace, agent_id, session_id)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = anyio.Lock()
        return lock

    async def _build(self, invocation: Invocation) -> Agent | MultiAgentBase:
        hosted = invocation.hosted
        loaded = self.config.spec_of(hosted.id)
        cached = self.sessions.take(_cache_key(invocation)) if _cacheable(invocation, loaded) else None
        if cached is not None:
            assert isinstance(cached.session_manager, SnapshotSessionManager)
            cached.session_manager.run_id = invocation.run_id
            return cached
        fresh = self.fresh.take(hosted.id) if _keeps_nothing(invocation, loaded) else None
        if fresh is not None:
            if invocation.history is not None:
                fresh.messages = _history_messages(invocation.history)
            return fresh
        manager = None
        if invocation.session_id is not None:
            storage = self.agent_storage(hosted.workspace, hosted.id)
            manager = SnapshotSessionManager(
                invocation.session_id, storage=storage, compaction=SERVER_COMPACTION
            )
            manager.run_id = invocation.run_id  # every journal record of the turn names its run
            manager.recheck_after = CACHED_RECHECK_S
        with deferred_initialization():  # the session loads below, on this event loop, without blocking it
            built: Agent | MultiAgentBase = build(loaded, session_manager=manager)
        if isinstance(built, Agent):
            await built.initialize()
            if _keeps_nothing(invocation, loaded):
                self.fresh.built(built)
            if invocation.history is not None:
                built.messages = _history_messages(invocation.history)
        return built

    def _task(self, invocation: Invocation, target: Agent | MultiAgentBase) -> Any:
        if invocation.answers:
            return invocation.prompt()
        if isinstance(target, MultiAgentBase) and invocation.history:
            context = "\n".join(f"{turn['role']}: {turn['content']}" for turn in invocation.history)
            return f"Conversation so far:\n{context}\n\n{invocation.task}"
        return invocation.task

    def _record(self, invocation: Invocation, kind: str) -> RunRecord:
        return RunRecord(
            run_id=invocation.run_id,
            agent_id=invocation.hosted.id,
            kind=kind,
            mode=invocation.mode,
            session_id=invocation.session_id,
            started_at=datetime.now(UTC).isoformat(),
            input=invocation.task,
            caller_history=len(invocation.history or []) if invocation.mode == "stateless" else 0,
            server=self.liveness.server_id,
        )

    def _finish(
        self, record: RunRecord, target: Agent | MultiAgentBase | None, outcome: Any, started: float
    ) -> Failure | None:
        """Fill in the final record; returns how a failure is answered (None: 200)."""
        record.finished_at = datetime.now(UTC).isoformat()
        record.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        failure = None
        if isinstance(outcome, BaseException):
            failure = failure_of(outcome, record.run_id)
            record.status = "failed"
            record.error = f"{type(outcome).__name__}: {outcome}"
            record.error_code, record.http_status, record.stored = (
                failure.code,
                failure.status,
                failure.stored,
            )
        elif isinstance(outcome, AgentResult):
            record.status = "interrupted" if outcome.stop_reason == "interrupt" else "completed"
            # A structured output is answered as JSON (an object), else the text.
            record.output = outcome.output if outcome.output is not None else str(outcome)
            record.usage = _usage(outcome.metrics.usage)
            record.resumed = outcome.resumed
            record.interrupts = [i.model_dump(mode="json") for i in outcome.interrupts]
        else:
            assert isinstance(outcome, MultiAgentResult)
            record.status = outcome.status.value
            record.output = outcome.output
            record.error = outcome.reason if outcome.status.value == "failed" else None
            record.usage = _usage(outcome.usage)
            record.resumed = outcome.resumed
            record.interrupts = [i.model_dump(mode="json") for i in outcome.interrupts]
            if record.status == "failed":
                failure = Failure(502, "run_failed", f"{outcome.reason} (run {record.run_id})")
                record.error_code, record.http_status, record.stored = "run_failed", 502, False
        if failure is None:
            record.http_status = 200
            record.stored = record.mode == "session"
        if isinstance(target, Agent):
            # Stateless mode persists nothing of the caller's history: only what this turn added.
            record.messages = list(target.messages[record.caller_history :])
        elif target is not None:
            record.nodes = _nodes_of(target, outcome if isinstance(outcome, MultiAgentResult) else None)
            record.edges = _edges_of(target)
        return failure

    async def invoke(self, workspace: str, invocation: Invocation) -> tuple[RunRecord, Failure | None]:
        """Run an invocation to the end (or answer a repeated request from its first run); returns the
        final run record and how to answer a failure (None: 200, with the record's output).

        The final run record is queued: the caller answers, then calls ``flush_records``.

        Raises:
            KeyRefused: a repeated Idempotency-Key that cannot be answered now (409) or was used for
                another request (422).
        """
        async with self._session_turn(workspace, invocation):
            with invocation.traced():
                if invocation.idempotency_key is not None:
                    replay = await self._claim(workspace, invocation)
                    if replay is not None:
                        return replay
                return await self._invoke(workspace, invocation)

    async def _claim(self, workspace: str, invocation: Invocation) -> tuple[RunRecord, Failure | None] | None:
        """Make the request's key name this run (None: run it), or the first run's answer to replay."""
        assert invocation.idempotency_key is not None
        keys, agent_id = self.keys(workspace), invocation.hosted.id
        while True:
            entry = await keys.claim(
                agent_id, invocation.idempotency_key, invocation.fingerprint, invocation.run_id
            )
            if entry is None:
                return None
            prior = await self.run_record(workspace, entry.run_id)
            if prior is not None and prior.status == "executing":
                running = self._running.get(prior.run_id)
                if running is not None:
                    await running.wait()  # the first request runs here: answer as it does
                    continue
                raise KeyRefused(
                    409,
                    "request_in_progress",
                    f"the first request with this Idempotency-Key (run {prior.run_id}) is still running on "
                    "another server; repeat it after Retry-After seconds to get its answer",
                    retry_after=1,
                )
            if prior is None and time.time() - entry.created_at < self.config.runs.server_gone_after_s:
                raise KeyRefused(
                    409,
                    "request_in_progress",
                    "the first request with this Idempotency-Key has just started; repeat it after "
                    "Retry-After seconds to get its answer",
                    retry_after=1,
                )
            if prior is not None and prior.stored is not False:
                return prior, _replayed_failure(prior)
            # The first request stored nothing (it failed, or died before its record): run it again.
            if await keys.take_over(agent_id, invocation.idempotency_key, entry, invocation.run_id):
                invocation.prior = prior or _lost_run(invocation, entry)
                return None

    async def _invoke(self, workspace: str, invocation: Invocation) -> tuple[RunRecord, Failure | None]:
        record = self._record(invocation, self.config.spec_of(invocation.hosted.id).spec.kind)
        runs = self.runs(workspace)
        running = self._running[record.run_id] = anyio.Event()
        try:
            started = time.perf_counter()
            target: Agent | MultiAgentBase | None = None
            outcome: Any
            try:
                target = await self._build_and_claim(invocation, record, runs)
                replay = await self._already_done(workspace, invocation, record)
                if replay is not None:
                    return replay
                if invocation.resume:
                    outcome = await _resume(target)
                elif isinstance(target, MultiAgentBase):
                    task = self._task(invocation, target)
                    outcome = await target.invoke_async(task, resume_unfinished=True)
                else:
                    agent = target
                    outcome = await self._claiming(
                        invocation, record, runs, agent, lambda: agent.invoke_async(invocation.prompt())
                    )
            except Exception as exc:
                outcome = exc
            failure = self._finish(record, target, outcome, started)
            if _leaves_no_record(invocation, target, outcome):
                await self._forget(runs, record)
            else:
                runs.save_later(record)
            self._keep(invocation, target, outcome)
            return record, failure
        finally:
            running.set()
            del self._running[record.run_id]

    async def _already_done(
        self, workspace: str, invocation: Invocation, record: RunRecord
    ) -> tuple[RunRecord, Failure | None] | None:
        """For a request that runs again what an earlier one left undone: with the session loaded (every
        later save is conditional on it), check that the earlier one did not store its turn after all."""
        prior = invocation.prior
        if prior is None or invocation.mode != "session":
            return None
        settled = await settle_from_session(
            self.config,
            self.agent_storage(workspace, prior.agent_id),
            prior,
            "a repeated request found it unfinished",
        )
        if settled.stored is not True:
            return None
        assert invocation.idempotency_key is not None
        keys = self.keys(workspace)
        entry = await keys.read(invocation.hosted.id, invocation.idempotency_key)
        if entry is not None:  # the key names the run that stored the turn again
            await keys.take_over(invocation.hosted.id, invocation.idempotency_key, entry, prior.run_id)
        await self.runs(workspace).save(settled)
        await self._forget(self.runs(workspace), record)
        return settled, _replayed_failure(settled)

    async def stream(self, workspace: str, invocation: Invocation) -> AsyncIterator[tuple[str, Any]]:
        """Run an invocation, yielding ``(event name, data)`` as it goes. The last is ``("result",
        record)`` or ``("error", (record, failure))``; a repeated request yields only that."""
        async with self._session_turn(workspace, invocation), contextlib.AsyncExitStack() as stack:
            stack.enter_context(invocation.traced())
            if invocation.idempotency_key is not None:
                replay = await self._claim(workspace, invocation)
                if replay is not None:
                    yield _last_event(*replay)
                    return
            record = self._record(invocation, self.config.spec_of(invocation.hosted.id).spec.kind)
            started = time.perf_counter()
            outcome: Any = None
            target: Agent | MultiAgentBase | None = None
            runs = self.runs(workspace)
            running = self._running[record.run_id] = anyio.Event()
            try:
                try:
                    target = await self._build_and_claim(invocation, record, runs, streamed=True)
                    replay = await self._already_done(workspace, invocation, record)
                    if replay is not None:
                        yield _last_event(*replay)
                        return
                    if isinstance(target, MultiAgentBase):
                        events: AsyncIterator[Any] = target.stream_async(
                            self._task(invocation, target), resume_unfinished=True
                        )
                    else:
                        events = target.stream_async(invocation.prompt())
                    async for event in events:
                        if isinstance(event, ResultEvent | MultiAgentResultEvent):
                            outcome = event.result
                            continue
                        converted = _event(event)
                        if converted is not None:
                            yield converted
                except Exception as exc:
                    outcome = exc
                failure = self._finish(record, target, outcome, started)
                if _leaves_no_record(invocation, target, outcome):
                    await self._forget(runs, record)
                else:
                    runs.save_later(record)
                self._keep(invocation, target, outcome)
            finally:
                running.set()
                del self._running[record.run_id]
            yield _last_event(record, failure)

    def _keep(self, invocation: Invocation, target: Any, outcome: Any) -> None:
        """After a turn, keep the session's agent for the next one, unless what it holds may no longer be
        the session as stored: another writer won (409), or a stored file was damaged. An agent of a turn
        that keeps nothing is put back as it was built, for the next such turn."""
        loaded = self.config.spec_of(invocation.hosted.id)
        if isinstance(target, Agent) and _keeps_nothing(invocation, loaded):
            self.fresh.give_back(invocation.hosted.id, target)
            return
        if not isinstance(target, Agent) or not _cacheable(invocation, loaded):
            return
        if isinstance(outcome, SessionConflictError | SnapshotError):
            return
        self.sessions.give_back(_cache_key(invocation), target)

    async def _forget(self, runs: RunStore, record: RunRecord) -> None:
        """Delete the ``executing`` record of a turn that stored nothing (logged if that fails: the record
        is then settled as failed when read)."""
        if record.mode != "session":
            return
        try:
            await runs.delete(record)
        except OrchestraError as exc:
            log.warning("run_record_not_deleted", run_id=record.run_id, error=str(exc))

    async def _claiming(
        self,
        invocation: Invocation,
        record: RunRecord,
        runs: RunStore,
        agent: Agent,
        turn: Callable[[], Awaitable[Any]],
    ) -> Any:
        """Run an agent's turn while its run record is written as "executing" beside it: the turn's save
        waits for the record (``before_save``), so a turn the session stores always has its record, and
        with a real model the write costs the turn nothing."""
        manager = agent.session_manager
        if invocation.session_id is None or not isinstance(manager, SnapshotSessionManager):
            return await turn()
        written = anyio.Event()
        errors: list[Exception] = []

        async def claim() -> None:
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
                group.start_soon(claim)
                result = await turn()
        except BaseExceptionGroup as group_error:
            raise unwrap_group(group_error) from None
        finally:
            manager.before_save = None
        if errors:
            raise errors[0]  # no save came to wait for it (the turn stored nothing): say why anyway
        return result

    async def _build_and_claim(
        self, invocation: Invocation, record: RunRecord, runs: RunStore, *, streamed: bool = False
    ) -> Agent | MultiAgentBase:
        """Build the target (loading its session) and, in session mode, write the run record as "executing"
        meanwhile: a turn the session stores always has its record, even if this process dies right after
        the save (the record then stays "executing" until it is settled from the session). An agent's
        record is written beside its turn instead (``_claiming``: its session may need no load), unless
        the turn is streamed (the stream's events leave no task group open around the turn)."""
        if invocation.session_id is None:
            return await self._build(invocation)
        spec_kind = self.config.spec_of(invocation.hosted.id).spec.kind
        if spec_kind == "agent" and not invocation.resume and not streamed:
            return await self._build(invocation)
        built: list[Agent | MultiAgentBase] = []

        async def build() -> None:
            built.append(await self._build(invocation))

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(build)
                group.start_soon(runs.save, record)
        except BaseExceptionGroup as group_error:
            raise unwrap_group(group_error) from None
        return built[0]

    def _session_turn(self, workspace: str, invocation: Invocation) -> Any:
        if invocation.session_id is None:
            return contextlib.nullcontext()
        return self._lock(workspace, invocation.hosted.id, invocation.session_id)


async def _resume(target: Agent | MultiAgentBase) -> Any:
    """Finish what a session left open: an agent's open turn, or a pipeline's unfinished run."""
    if isinstance(target, Agent):
        if target.open_turn() is None:
            raise NothingToResume("the session has no open turn to resume: send a message instead")
        return await target.invoke_async(None)
    if target.status.value not in ("executing", "failed", "interrupted"):
        raise NothingToResume("the session has no unfinished run to resume: send a task instead")
    return await target.invoke_async(None)


def _cacheable(invocation: Invocation, loaded: Any) -> bool:
    """A session-mode turn of a hosted agent (not a pipeline): its agent may be kept between turns."""
    return invocation.session_id is not None and invocation.history is None and loaded.spec.kind == "agent"


def _keeps_nothing(invocation: Invocation, loaded: Any) -> bool:
    """A stateless or no-memory turn of a hosted agent: its agent may be put back as built and reused."""
    return invocation.session_id is None and loaded.spec.kind == "agent"


def _cache_key(invocation: Invocation) -> tuple[str, str, str]:
    assert invocation.session_id is not None
    return (invocation.hosted.workspace, invocation.hosted.id, invocation.session_id)


def _leaves_no_record(invocation: Invocation, target: Any, outcome: Any) -> bool:
    """A turn that never ran (its session did not load) or lost to another writer stored nothing: unless
    a repeat with its Idempotency-Key may ask for it, it leaves no run record."""
    never_ran = target is None or isinstance(outcome, SessionConflictError | NothingToResume)
    return never_ran and isinstance(outcome, Exception) and invocation.idempotency_key is None


def _replayed_failure(record: RunRecord) -> Failure | None:
    """How a recorded run was answered, to answer a repeat the same way."""
    if record.http_status in (None, 200):
        return None
    return Failure(record.http_status, record.error_code or "run_failed", record.error or "the run failed")


def _lost_run(invocation: Invocation, entry: KeyEntry) -> RunRecord:
    """A stand-in for a run whose record was never written (its request died first)."""
    return RunRecord(
        run_id=entry.run_id,
        agent_id=invocation.hosted.id,
        kind="agent",
        mode=invocation.mode,
        session_id=invocation.session_id,
        started_at=datetime.fromtimestamp(entry.created_at, UTC).isoformat(),
        status="executing",
    )


def _last_event(record: RunRecord, failure: Failure | None) -> tuple[str, Any]:
    return ("result", record) if failure is None else ("error", (record, failure))


def _kind(target: Agent | MultiAgentBase) -> str:
    return "agent" if isinstance(target, Agent) else target.kind


def _nodes_of(target: MultiAgentBase, result: MultiAgentResult | None) -> dict[str, dict[str, Any]]:
    nodes: dict[str, dict[str, Any]] = {}
    for node_id, node in target.nodes.items():
        record = target._fields.get(f"node/{node_id}") or {}
        node_result = result.results.get(node_id) if result else None
        nodes[node_id] = {
            "kind": node.kind,
            "status": record.get("status", "pending"),
            "executions": record.get("executions", 0),
            "output": output_text(node_result.output) if node_result else None,
            "execution_time_ms": node_result.execution_time_ms if node_result else None,
            "messages": list(node.agent.messages) if node.kind == "agent" else [],
        }
    return nodes


def _edges_of(target: MultiAgentBase) -> list[list[str]]:
    if isinstance(target, Graph):
        return [[e.src, e.dst, "condition" if e.condition else ""] for e in target.edges]
    if isinstance(target, Swarm):
        names = list(target.nodes)
        return [[a, b, "handoff"] for a in names for b in names if a != b]
    return []


def _event(event: Any) -> tuple[str, Any] | None:
    """A stream event as an SSE event name and JSON data (None for events not worth sending)."""
    if isinstance(event, TextChunkEvent):
        return "text", {"text": event.text}
    if isinstance(event, ToolCallEvent):
        return "tool_call", event.tool_use
    if isinstance(event, ToolResultEvent):
        return "tool_result", event.result
    if isinstance(event, MessageEvent):
        return None
    if isinstance(event, NodeStartEvent):
        return "node_start", {"node_id": event.node_id, "execution_count": event.execution_count}
    if isinstance(event, NodeStopEvent):
        return "node_stop", {
            "node_id": event.node_id,
            "status": event.result.status.value,
            "output": event.result.text,
        }
    if isinstance(event, HandoffEvent):
        return "handoff", {"from": event.from_node, "to": event.to_node, "message": event.message}
    if isinstance(event, NodeStreamEvent):
        inner = _event(event.event)
        if inner is None:
            return None
        name, data = inner
        return name, {**data, "node_id": event.node_id} if isinstance(data, dict) else data
    return None
