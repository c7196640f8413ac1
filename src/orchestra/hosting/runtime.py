"""Invoking hosted agents and pipelines in the three memory modes, one run per session at a time.

- **session** (``session_id``): the agent (or pipeline) is built fresh for the request and attached to a
  ``SnapshotSessionManager`` over the workspace's storage, which restores the whole conversation and
  saves the new turn. A pipeline whose last run in that session did not finish resumes it.
- **stateless** (``history``): the history is the agent's starting conversation (for a pipeline, it is
  put before the task as context); nothing is persisted.
- **none**: a fresh agent or pipeline, nothing persisted.

A session runs one run at a time, across every server on the storage (``slots.py``): a message to a
running session is refused, queued, or stops the running one, by its ``on_busy`` policy. The session's
conditional writes stay the last word: a writer that lost gets ``SessionConflictError`` (409).

Every run has a record (``runs.py``): in session mode written ``executing`` (durably) while the session
loads, and final after the answer. Each journal record the run writes carries its run id, so a record left
``executing`` by a server that died is settled from the session when it is next read (``settle.py``). A
request with an ``Idempotency-Key`` is run once: a repeat is answered from the first run's record, waits
for it, or runs it again if it stored nothing (``idempotency.py``). A run can be stopped from any server
(``signals.py``); how it ends is ``turns.py``, how each outcome is answered ``outcomes.py``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio

from orchestra._concurrency import map_concurrently, unwrap_group
from orchestra._logging import get_logger
from orchestra.agent import Agent
from orchestra.agent.agent import deferred_initialization
from orchestra.errors import OrchestraError, SessionConflictError, SnapshotError, StorageError
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.events import EventLog
from orchestra.hosting.idempotency import IdempotencyKeys, KeyRefused
from orchestra.hosting.interrupts import (
    ResponsesRefused,
    all_open,
    check_responses,
    close_asking,
    close_if_answered,
)
from orchestra.hosting.invocation import Invocation, input_text
from orchestra.hosting.liveness import Liveness
from orchestra.hosting.outcomes import Failure, NothingToResume
from orchestra.hosting.repeats import already_done, claim
from orchestra.hosting.runs import RunRecord, RunStore
from orchestra.hosting.session_cache import FreshAgents, SessionCache, cache_key, cacheable, keeps_nothing
from orchestra.hosting.settle import close_resumed, ended_in_session, settle_from_session
from orchestra.hosting.signals import Stop, Stops
from orchestra.hosting.slots import Busy, Holder, SessionSlots
from orchestra.hosting.turns import (
    SERVER_COMPACTION,
    Stopped,
    claiming,
    finish,
    recorded_failure,
    run_target,
    settle_stop,
    terminal_event,
)
from orchestra.hosting.webhooks import Webhooks
from orchestra.multiagent import MultiAgentBase
from orchestra.multiagent.events import BeforeMultiAgentInvocation
from orchestra.session import SnapshotSessionManager
from orchestra.spec import build
from orchestra.storage import LocalFileStorage, PrefixedStorage, Storage, storage_from_uri

__all__ = ["Invocation", "Runtime", "input_text"]  # Invocation and input_text: from invocation.py

log = get_logger("orchestra.server")

_CONFLICT_RETRIES = 5  # times a background run runs again after losing its session to a plain writer
# Why a record still executing on another live server is read from its session (its final record may
# not be written yet: the turn is answered first).
_ELSEWHERE = "its server had not written its final record yet"


def _history_messages(history: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"role": turn["role"], "content": [{"text": turn["content"]}]} for turn in history]


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
        self.stops = Stops(config.runs.poll_s)
        self.fresh = FreshAgents()
        self.sessions = SessionCache(
            config.limits.cached_sessions, int(config.limits.cached_session_mb * 2**20)
        )
        self._views: dict[str, tuple[Storage, Storage]] = {}
        self._slots: dict[str, SessionSlots] = {}
        self._runs: dict[str, RunStore] = {}
        self._running: dict[str, anyio.Event] = {}  # run id -> set when its final record is readable
        self._inflight: dict[str, anyio.Event] = {}  # request's run id -> set when the request is answered
        self._changed: dict[str, anyio.Event] = {}  # run id -> set when it starts or ends here
        self.webhooks = Webhooks(config.webhooks)
        self.logs: dict[str, EventLog] = {}  # the event logs of runs running here
        self._unreleased: set[tuple[str, str, str, str]] = set()  # releases to try again
        # Starts a queued run on this server (set by the background runner while the app runs).
        self.launch: Any = None

    def storage(self, workspace: str) -> Storage:
        """The part of the storage that belongs to one workspace."""
        cached = self._views.get(workspace)
        if cached is None or cached[0] is not self.root:  # (tests put a wrapper in place of root)
            cached = self._views[workspace] = (self.root, PrefixedStorage(self.root, f"ws/{workspace}"))
        return cached[1]

    def unsynced(self, workspace: str) -> Storage:
        """The workspace's storage, written without fsync on local files (what a killed process keeps)."""
        return PrefixedStorage(self._unsynced_root, f"ws/{workspace}")

    def agent_storage(self, workspace: str, agent_id: str) -> Storage:
        """Where one hosted agent's sessions live: sessions are per agent, so one session id used with
        two agents gives two separate histories."""
        return PrefixedStorage(self.storage(workspace), f"agents/{agent_id}")

    def runs(self, workspace: str) -> RunStore:
        """The workspace's run records (one store per workspace: it holds the records not yet written)."""
        store = self._runs.get(workspace)
        if store is None:
            store = self._runs[workspace] = RunStore(self.storage(workspace), self.unsynced(workspace))
        return store

    def slots(self, workspace: str) -> SessionSlots:
        """Which run each of the workspace's sessions runs, and which wait (``slots.py``)."""
        slots = self._slots.get(workspace)
        if slots is None:
            slots = self._slots[workspace] = SessionSlots(
                self.unsynced(workspace), self.liveness, self.config.runs.max_queue
            )
        return slots

    def keys(self, workspace: str) -> IdempotencyKeys:
        """The workspace's idempotency keys."""
        return IdempotencyKeys(self.storage(workspace), self.config.runs.idempotency_ttl_s)

    async def flush_records(self, workspace: str) -> None:
        """Write the run records queued by finished invocations (after their answers were sent)."""
        await self.runs(workspace).flush()

    def changed(self, run_id: str) -> anyio.Event:
        """An event set when ``run_id`` starts or ends on this server (``notify``)."""
        return self._changed.setdefault(run_id, anyio.Event())

    def runs_here(self, run_id: str) -> bool:
        """Whether ``run_id`` is running on this server now."""
        return run_id in self._running

    def notify(self, run_id: str) -> None:
        """Wake whoever waits here for ``run_id`` to start or end."""
        if not self._changed:
            return
        changed = self._changed.pop(run_id, None)
        if changed is not None:
            changed.set()

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
        return await map_concurrently(functools.partial(self._settled, workspace), records)

    async def _settled(self, workspace: str, record: RunRecord) -> RunRecord:
        why = await self._why_unsettled(record)
        if why is None:
            return await close_if_answered(self.runs(workspace), record)  # (interrupts.py)
        storage = self.agent_storage(workspace, record.agent_id)
        if why is _ELSEWHERE:
            # Its server answers a turn after its commit point and writes the final record after the
            # answer: read from the session, a run that ended is final at once. Not written here: its
            # server writes its own (or, if it stopped, a read after it counts as gone does).
            return await ended_in_session(self.config, storage, record, why) or record
        settled = await settle_from_session(self.config, storage, record, why)
        await self.runs(workspace).save(settled)
        return settled

    async def _why_unsettled(self, record: RunRecord) -> str | None:
        if record.settled is not None or record.agent_id not in self.config.loaded or record.background:
            return None  # a background run of a server that is gone is taken over by a sweep instead
        if record.status == "executing":
            if record.run_id in self._running:
                return None
            if record.server == self.liveness.server_id:
                return "this server did not finish its record"
            if await self.liveness.is_alive(record.server):
                return _ELSEWHERE
            return "its server stopped before the run was recorded as finished"
        if record.stored is None and record.status == "failed" and record.mode == "session":
            return "the storage could not tell whether its turn was stored"
        return None

    async def wait_final(self, workspace: str, run_id: str) -> RunRecord:
        """``run_id``'s record once it has ended, wherever it runs (woken here, else read every poll)."""
        while True:
            running = self._running.get(run_id)
            if running is not None:
                await running.wait()
            record = await self.run_record(workspace, run_id)
            if record is None:
                raise KeyRefused(404, "unknown_run", f"run {run_id} is gone (its session was deleted?)")
            if record.final:
                return record
            with anyio.move_on_after(self.config.runs.poll_s):
                await self.changed(run_id).wait()

    # -- running --------------------------------------------------------------------------------------

    async def _build(self, invocation: Invocation) -> Agent | MultiAgentBase:
        hosted = invocation.hosted
        loaded = self.config.spec_of(hosted.id)
        manager = None
        kind, session_id = loaded.spec.kind, invocation.session_id
        if self._uses_cache(invocation, kind):  # the agent kept since the session's last turn
            cached = self.sessions.take(cache_key(hosted.workspace, hosted.id, session_id))
            if cached is not None:
                assert isinstance(cached.session_manager, SnapshotSessionManager)
                # Before its history reaches the model: another server may have written or deleted the
                # session since (else it is loaded afresh below).
                if await cached.session_manager.is_current(cached):
                    cached.session_manager.run_id = invocation.run_id
                    return cached
        elif session_id is not None:  # this run writes the session: an agent kept for it would be behind
            self.sessions.forget(hosted.workspace, hosted.id, session_id)
        fresh = self.fresh.take(hosted.id) if keeps_nothing(session_id, kind) else None
        if fresh is not None:
            if invocation.history is not None:
                fresh.messages = _history_messages(invocation.history)
            return fresh
        if invocation.session_id is not None:
            storage = self.agent_storage(hosted.workspace, hosted.id)
            manager = SnapshotSessionManager(
                invocation.session_id,
                storage=storage,
                compaction=SERVER_COMPACTION,
                keep_dropped_messages=True,  # the whole conversation stays readable (docs/server.md)
            )
            manager.run_id = invocation.run_id  # every journal record of the turn names its run
        with deferred_initialization():  # the session loads below, on this event loop, without blocking it
            built: Agent | MultiAgentBase = build(loaded, session_manager=manager)
        if isinstance(built, Agent):
            await built.initialize()
            if keeps_nothing(session_id, kind):
                self.fresh.built(built)
            if invocation.history is not None:
                built.messages = _history_messages(invocation.history)
        elif invocation.responses is not None and manager is not None:
            # Load the saved run now (the invocation will not load it again), to check the answers.
            await built.hooks.invoke(BeforeMultiAgentInvocation(built, {}))
        return built

    def _task(self, invocation: Invocation, target: Agent | MultiAgentBase) -> str | None:
        if isinstance(target, MultiAgentBase) and invocation.history:
            context = "\n".join(f"{turn['role']}: {turn['content']}" for turn in invocation.history)
            return f"Conversation so far:\n{context}\n\n{invocation.task}"
        return invocation.task

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
        return RunRecord(
            run_id=invocation.run_id,
            agent_id=invocation.hosted.id,
            kind=self.config.spec_of(invocation.hosted.id).spec.kind,
            mode=invocation.mode,
            session_id=invocation.session_id,
            started_at=datetime.now(UTC).isoformat(),
            input=invocation.task,
            caller_history=len(invocation.history or []) if invocation.mode == "stateless" else 0,
            server=self.liveness.server_id,
            **extra,
        )

    async def invoke(
        self, workspace: str, invocation: Invocation, log: EventLog | None = None
    ) -> tuple[RunRecord, Failure | None]:
        """Run an invocation to the end (or answer a repeated request from its first run); returns the
        final run record and how to answer a failure (None: 200, with the record's output). With ``log``,
        the run's events are written to it, its terminal event last.

        A session-mode record is final in memory: the caller answers, then calls ``flush_records``.

        Raises:
            KeyRefused: a repeated Idempotency-Key that cannot be answered now (409) or was used for
                another request (422).
            Busy: the session runs another run and ``on_busy`` does not let this one wait (409), or its
                queue is full (429).
        """
        # Registered at once: a repeat of this request's key that arrives meanwhile waits for it.
        registered = None
        if invocation.idempotency_key is not None:
            registered = self._inflight[invocation.run_id] = anyio.Event()
        try:
            with invocation.traced():
                if invocation.idempotency_key is not None:
                    replay = await claim(self, workspace, invocation)
                    if replay is not None:
                        return replay
                if invocation.session_id is None:
                    return await self.execute(workspace, invocation, log)
                if invocation.on_busy == "reject":  # no storage operation (slots.py)
                    return await self._plain(workspace, invocation, log)
                if invocation.on_busy == "enqueue":
                    return await self._in_line(workspace, invocation, log)
                slots, holder = self.slots(workspace), Holder(invocation.run_id, self.liveness.server_id)
                try:
                    await slots.acquire(invocation.hosted.id, invocation.session_id, holder, "reject")
                except Busy:
                    return await self._queue_and_wait(workspace, invocation)
                return await self._holding(workspace, invocation, log)
        finally:
            if registered is not None:
                del self._inflight[invocation.run_id]
                registered.set()

    def stream(self, workspace: str, invocation: Invocation) -> AsyncIterator[tuple[str, Any]]:
        """Run an invocation, yielding ``(event name, data)`` as its events are kept; the last is
        ``("result", record)`` or ``("error", (record, failure))`` (what the protocol front doors read).

        Raises:
            KeyRefused, Busy: as ``invoke``.
        """
        from orchestra.hosting.streams import runtime_events  # streams.py builds on this module

        return runtime_events(self, workspace, invocation)

    async def _holding(
        self, workspace: str, invocation: Invocation, log: EventLog | None, record: RunRecord | None = None
    ) -> tuple[RunRecord, Failure | None]:
        """Run an invocation that has its session, and hand the session on when it ends."""
        assert invocation.session_id is not None
        try:
            return await self.execute(workspace, invocation, log, record)
        finally:
            await self.release(workspace, invocation.hosted.id, invocation.session_id, invocation.run_id)

    async def _plain(
        self, workspace: str, invocation: Invocation, log: EventLog | None
    ) -> tuple[RunRecord, Failure | None]:
        """Run an invocation with ``reject``: its session is taken on this server only."""
        assert invocation.session_id is not None
        agent_id, session_id = invocation.hosted.id, invocation.session_id
        slots = self.slots(workspace)
        plain = slots.hold_plain(agent_id, session_id, invocation.run_id)
        invocation.held_here = invocation.keeps_agent = True
        try:
            return await self.execute(workspace, invocation, log)
        finally:
            with anyio.CancelScope(shield=True):
                if await slots.end_plain(agent_id, session_id, plain):
                    await self.release(workspace, agent_id, session_id, invocation.run_id)

    async def _in_line(
        self, workspace: str, invocation: Invocation, log: EventLog | None
    ) -> tuple[RunRecord, Failure | None]:
        """Run an ``enqueue`` invocation: after the ones that came before it on this server, it takes its
        session in the busy document, or its place in the session's queue there and waits here for its
        turn (``slots.claim``), so that a message to any server meanwhile waits behind it."""
        assert invocation.session_id is not None
        agent_id, session_id = invocation.hosted.id, invocation.session_id
        slots = self.slots(workspace)
        async with slots.in_line(agent_id, session_id):
            waiter = await slots.claim(agent_id, session_id, invocation.run_id)
        try:
            after_mine = await slots.wait_turn(agent_id, session_id, waiter, self.config.runs.poll_s)
        except BaseException:
            if waiter.handed.is_set():  # handed the session as it was cancelled: hand it on
                await self.release(workspace, agent_id, session_id, invocation.run_id)
            raise
        if not after_mine:  # another server's run had the session since this server's last turn
            self.sessions.forget(workspace, agent_id, session_id)
        invocation.keeps_agent = True
        return await self._holding(workspace, invocation, log)

    async def release(
        self, workspace: str, agent_id: str, session_id: str, run_id: str, *, for_gone: bool = False
    ) -> None:
        """``run_id`` no longer runs: the next queued run of the session starts here. A release that
        fails is logged: the session's document then names a run this process does not run, which the
        next message (or a sweep) takes as ended."""
        with anyio.CancelScope(shield=True):
            try:
                head = await self.slots(workspace).release(agent_id, session_id, run_id, for_gone=for_gone)
            except StorageError as exc:
                log_release_failure(session_id, run_id, exc)
                self._unreleased.add((workspace, agent_id, session_id, run_id))
                return
            self._unreleased.discard((workspace, agent_id, session_id, run_id))
            if head is not None:
                self.start(workspace, head.run_id)

    async def retry_releases(self) -> None:
        """Try again the releases whose storage failed (a sweep calls it)."""
        for workspace, agent_id, session_id, run_id in sorted(self._unreleased):
            await self.release(workspace, agent_id, session_id, run_id)

    def start(self, workspace: str, run_id: str) -> None:
        """Start a queued run on this server: in the background while the app runs; without it (an app
        driven without its lifespan) the next sweep-less request cannot, so it is logged."""
        if self.launch is not None:
            self.launch(workspace, run_id)
        else:
            log.warning(
                "queued_run_not_started", run_id=run_id, reason="the background runner is not running"
            )

    async def _queue_and_wait(
        self, workspace: str, invocation: Invocation
    ) -> tuple[RunRecord, Failure | None]:
        """A plain request whose session is busy and whose policy lets it wait: its run is queued like a
        background one (any server may start it), and the request answers when it ends."""
        from orchestra.hosting.background import start_background  # built on this module

        record = await start_background(self, workspace, invocation)
        final = await self.wait_final(workspace, record.run_id)
        return final, recorded_failure(final)

    async def execute(
        self,
        workspace: str,
        invocation: Invocation,
        log: EventLog | None = None,
        record: RunRecord | None = None,
    ) -> tuple[RunRecord, Failure | None]:
        """Run an invocation that holds its session (if it has one) to its final record. A background
        run's record is the caller's to write; a plain one's is queued for ``flush_records``."""
        record = record or self.record_of(invocation)
        running = self._running[record.run_id] = anyio.Event()
        stoppable = invocation.session_id is not None or invocation.background
        stop = self.stops.register(record.run_id, self.storage(workspace), stoppable=stoppable)
        self.notify(record.run_id)
        if log is not None:
            self.logs[record.run_id] = log
        try:
            if log is None:  # a plain invoke keeps no events: no writer, no task group
                result = await self._turn(workspace, invocation, record, stop, log)
            else:
                async with anyio.create_task_group() as group:
                    group.start_soon(log.run_writer)
                    result = await self._turn(workspace, invocation, record, stop, log)
                    log.append(*terminal_event(*result))
                    await log.close()  # the writer ends once every event is written
        except BaseExceptionGroup as group_error:
            raise unwrap_group(group_error) from None
        finally:
            self.stops.unregister(stop)
            if stop.request is not None:  # answered: the request goes (a sweep clears late ones)
                with anyio.CancelScope(shield=True):
                    await self.stops.clear(self.storage(workspace), record.run_id)
            if log is not None and self.logs.get(record.run_id) is log:
                del self.logs[record.run_id]
            running.set()
            del self._running[record.run_id]
            self.notify(record.run_id)
        return result

    async def _turn(
        self, workspace: str, invocation: Invocation, record: RunRecord, stop: Stop, log: EventLog | None
    ) -> tuple[RunRecord, Failure | None]:
        """Build, check, run and record the invocation (``execute`` without its bookkeeping)."""
        runs = self.runs(workspace)
        started = time.perf_counter()
        target: Agent | MultiAgentBase | None = None
        outcome: Any
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                target = await self._build_and_claim(invocation, record, runs)
                replay = await already_done(self, workspace, invocation, record)
                if replay is not None:
                    return replay
                if invocation.responses is not None and not all_open(target, invocation.responses):
                    # Only a refusal needs the earlier runs: were these answered already, and by which?
                    earlier = await self._answered_earlier(workspace, invocation)
                    check_responses(target, invocation.responses, earlier)
                task = self._task(invocation, target)
                if self._claims_beside(invocation, target):  # its record is written beside the turn
                    assert isinstance(target, Agent)
                    outcome = await claiming(
                        record,
                        runs,
                        target,
                        functools.partial(run_target, target, invocation, task, stop, log),
                    )
                else:
                    outcome = await run_target(target, invocation, task, stop, log)
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
        if isinstance(outcome, Stopped):
            storage = self.agent_storage(workspace, invocation.hosted.id)
            try:
                outcome = await settle_stop(outcome, target, invocation, record, storage)
            except (
                OrchestraError
            ) as exc:  # it read or changed the session half way: say so, never "not stored"
                outcome.stored = None
                outcome.note = f"what the stop left in the session is not known: {exc}"
        failure = finish(record, target, outcome, started)
        if _leaves_no_record(invocation, target, outcome):
            await self.forget(runs, record)
        elif not invocation.background:
            runs.save_later(record)
        if invocation.responses or record.resumed:
            await self._close_earlier(runs, record)
        self._keep(workspace, invocation, target, outcome)
        return record, failure

    @staticmethod
    def _uses_cache(invocation: Invocation, kind: str) -> bool:
        """Plain and ``enqueue`` turns keep their session's agent between turns; another run of the
        session (in the background, or with another policy) loads it (it may follow a run of another
        server: the busy document says so, a kept agent would not)."""
        if not invocation.keeps_agent:
            return False
        return cacheable(invocation.session_id, invocation.history, kind)

    def _claims_beside(self, invocation: Invocation, target: Agent | MultiAgentBase) -> bool:
        """A plain session turn of an agent: its record is written beside the turn (its session may need
        no load: a kept agent), not beside the load."""
        return (
            isinstance(target, Agent)
            and invocation.session_id is not None
            and not invocation.background
            and not invocation.resume
        )

    def _keep(self, workspace: str, invocation: Invocation, target: Any, outcome: Any) -> None:
        """After a turn, keep the session's agent for the next one, unless what it holds may no longer be
        the session as stored: another writer won (409), a stored file was damaged, or a stop changed
        the session under it (a rollback). An agent of a turn that keeps nothing is put back as built."""
        hosted, kind = invocation.hosted, self.config.spec_of(invocation.hosted.id).spec.kind
        if isinstance(target, Agent) and keeps_nothing(invocation.session_id, kind):
            self.fresh.give_back(hosted.id, target)
            return
        if not isinstance(target, Agent) or not self._uses_cache(invocation, kind):
            return
        if isinstance(outcome, SessionConflictError | SnapshotError | Stopped):
            return
        self.sessions.give_back(cache_key(workspace, hosted.id, invocation.session_id), target)

    @staticmethod
    async def _close_earlier(runs: RunStore, record: RunRecord) -> None:
        """The runs whose interrupts this one answered, or whose open turn it finished, are closed
        (``interrupts.py``, ``settle.py``); a failure is logged, never raised (the turn is stored): a read
        of a run left waiting closes it later."""
        try:
            await close_asking(runs, record)
            await close_resumed(runs, record)
        except (OrchestraError, OSError) as exc:
            log.warning("answered_runs_not_closed", run_id=record.run_id, error=str(exc))

    async def _answered_earlier(self, workspace: str, invocation: Invocation) -> dict[str, str]:
        """Interrupt ids the session's earlier runs answered, and by which run (for a clear 409)."""
        records = await self.runs(workspace).list([invocation.hosted.id], invocation.session_id, 50)
        return {
            answer["interrupt_id"]: record.run_id
            for record in records
            if record.run_id != invocation.run_id and record.status != "failed"
            for answer in record.responses
        }

    def waiting_on(self, run_id: str) -> anyio.Event | None:
        """An event set when the request or run ``run_id`` ends on this server (None: not here)."""
        return self._inflight.get(run_id) or self._running.get(run_id)

    async def forget(self, runs: RunStore, record: RunRecord) -> None:
        """Delete the ``executing`` record of a turn that stored nothing (logged if that fails: the record
        is then settled as failed when read)."""
        if record.mode != "session" or record.background:
            return
        try:
            await runs.delete(record)
        except OrchestraError as exc:
            log.warning("run_record_not_deleted", run_id=record.run_id, error=str(exc))

    async def _build_and_claim(
        self, invocation: Invocation, record: RunRecord, runs: RunStore
    ) -> Agent | MultiAgentBase:
        """Build the target (loading its session) and, in session mode, write the run record as "executing"
        meanwhile: a turn the session stores always has its record, even if this process dies right after
        the save (the record then stays "executing" until it is settled from the session). A background
        run's record is written before it starts."""
        spec_kind = self.config.spec_of(invocation.hosted.id).spec.kind
        if invocation.session_id is None or invocation.background:
            return await self._build(invocation)
        if spec_kind == "agent" and not invocation.resume:
            return await self._build(invocation)  # its record is written beside its turn (_claims_beside)
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


def log_release_failure(session_id: str, run_id: str, exc: Exception) -> None:
    log.warning("session_not_released", session_id=session_id, run_id=run_id, error=str(exc))


def _leaves_no_record(invocation: Invocation, target: Any, outcome: Any) -> bool:
    """A turn that never ran (its session did not load) or lost to another writer stored nothing: unless
    a repeat with its Idempotency-Key may ask for it, it leaves no run record."""
    never_ran = target is None or isinstance(
        outcome, SessionConflictError | ResponsesRefused | NothingToResume
    )
    return never_ran and isinstance(outcome, Exception) and invocation.idempotency_key is None
