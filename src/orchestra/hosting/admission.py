"""A request's way to its run: its Idempotency-Key first, then its session by the policy for a busy
session, then the run (``execution.py``), then the session handed on.

**One Idempotency-Key path** (``first_answer``), for invokes and background starts alike: the key's entry
is created naming this run (create-only: of two servers one wins), or it names the first run, which
answers the repeat: an invoke gets the first run's answer once it has ended (waiting for it here, or
for a background run anywhere), a background start gets the first run's record as accepted (202). A
first run that stored nothing, or left its turn open (its server died inside a side-effecting tool), is
run again by the repeat, which takes the key over; one still running on another server answers 409
``request_in_progress``.

**A session runs one run at a time**, across every server on the storage (``session_queue.py``):

- ``enqueue`` (the default): after the messages that came before it on this server, it takes its
  session in the busy document, or its place in the session's queue there, and waits here for its
  turn (``SessionQueues.enter``, ``wait_turn``), so that a message to any server meanwhile waits
  behind it;
- ``reject``: the session is held on this server only (no storage operation); across servers the
  session's conditional writes refuse a second writer (409 ``session_conflict``);
- ``interrupt`` / ``rollback``: taken with a compare-and-swap; a busy session queues the message as a
  background run (asking the running one to stop) and the request waits for it to end.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime

import anyio

from orchestra.errors import StorageConflictError
from orchestra.hosting.background import BackgroundRuns
from orchestra.hosting.building import Builder
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.events import EventLog
from orchestra.hosting.execution import Executor, RunOutcome
from orchestra.hosting.idempotency import KeyEntry, KeyRefused
from orchestra.hosting.invocation import Invocation
from orchestra.hosting.outcomes import recorded_failure
from orchestra.hosting.reader import RunReader
from orchestra.hosting.records import RunRecord
from orchestra.hosting.running import Running
from orchestra.hosting.session_queue import Busy, Holder
from orchestra.hosting.workspaces import Workspaces

__all__ = ["Admission"]


class Admission:
    """Admits requests to their runs (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        workspaces: Workspaces,
        running: Running,
        reader: RunReader,
        builder: Builder,
        executor: Executor,
        background: BackgroundRuns,
    ) -> None:
        self.config = config
        self.workspaces = workspaces
        self.liveness = workspaces.liveness
        self.running = running
        self.reader = reader
        self.builder = builder
        self.executor = executor
        self.background = background

    async def invoke(self, workspace: str, invocation: Invocation, log: EventLog | None = None) -> RunOutcome:
        """Run an invocation to the end (or answer a repeated request from its first run); returns the
        final run record and how to answer a failure (None: 200, with the record's output). With ``log``,
        the run's events are written to it, its terminal event last.

        A session-mode record is final in memory: the caller answers, then flushes the workspace's records.

        Raises:
            KeyRefused: a repeated Idempotency-Key that cannot be answered now (409) or was used for
                another request (422).
            Busy: the session runs another run and ``on_busy`` does not let this one wait (409), or its
                queue is full (429).
        """
        with contextlib.ExitStack() as stack:
            if invocation.idempotency_key is not None:  # a repeat that arrives meanwhile waits for it
                stack.enter_context(self.running.request(invocation.run_id))
            stack.enter_context(invocation.traced())
            if invocation.idempotency_key is not None:
                first = await self.first_answer(workspace, invocation)
                if first is not None:
                    return first, recorded_failure(first)
            if invocation.session_id is None:
                return await self.executor.execute(workspace, invocation, log)
            if invocation.on_busy == "reject":  # no storage operation (session_queue.py)
                return await self._plain(workspace, invocation, log)
            if invocation.on_busy == "enqueue":
                return await self._in_line(workspace, invocation, log)
            queues, holder = (
                self.workspaces.queues(workspace),
                Holder(invocation.run_id, self.liveness.server_id),
            )
            try:
                await queues.acquire(invocation.hosted.id, invocation.session_id, holder, "reject")
            except Busy:
                return await self._queue_and_wait(workspace, invocation)
            return await self._holding(workspace, invocation, log)

    async def start(self, workspace: str, invocation: Invocation) -> tuple[RunRecord, bool]:
        """Start a background run (queued, or started here when its session is free); or, for a repeated
        Idempotency-Key, the first run's record. Returns the record and whether it is the first run's.

        Raises:
            KeyRefused: as ``invoke``.
            Busy: as ``invoke``; the key is then free again (nothing was started).
        """
        if invocation.idempotency_key is not None:
            first = await self.first_answer(workspace, invocation, accepted=True)
            if first is not None:
                return first, True
        try:
            return await self.background.start(workspace, invocation), False
        except Busy:
            if invocation.idempotency_key is not None:  # nothing was started: the key is free again
                await self.workspaces.keys(workspace).forget(invocation.hosted.id, invocation.idempotency_key)
            raise

    async def first_answer(
        self, workspace: str, invocation: Invocation, *, accepted: bool = False
    ) -> RunRecord | None:
        """Make the request's key name this run (None: run it), or the first run's record to answer with:
        ended (an invoke), or as it is once accepted (``accepted``: a background start). See the module
        docstring.

        Raises:
            KeyRefused: the first request still runs on another server, or has just started (409), or the
                key was used for another body (422).
        """
        assert invocation.idempotency_key is not None
        keys, agent_id = self.workspaces.keys(workspace), invocation.hosted.id
        while True:
            entry = await keys.claim(
                agent_id, invocation.idempotency_key, invocation.fingerprint, invocation.run_id
            )
            if entry is None:
                return None
            if not accepted and (first := self.running.waiting_on(entry.run_id)) is not None:
                await first.wait()  # the first request runs here: answer as it does
            prior = await self.reader.run_record(workspace, entry.run_id)
            if accepted and prior is not None:
                return prior
            while prior is not None and prior.needs_resume and prior.resumed_by is not None:
                prior = await self.reader.run_record(workspace, prior.resumed_by)  # the run that went on
            if prior is not None and not prior.final:
                if prior.background and await self.liveness.is_alive(prior.server):
                    prior = await self.reader.wait_final(workspace, prior.run_id)  # queued, or elsewhere
                else:
                    raise _in_progress(f"(run {prior.run_id}) is still running on another server")
            if prior is None and time.time() - entry.created_at < self.config.runs.server_gone_after_s:
                raise _in_progress("has just started")
            # A run that ended is answered as it was; one that stored nothing because it failed runs again,
            # and so does one whose turn was left open (the same request again finishes it).
            again = (
                prior is None or prior.needs_resume or (prior.stored is False and prior.status == "failed")
            )
            if not again:
                return prior
            if await keys.take_over(agent_id, invocation.idempotency_key, entry, invocation.run_id):
                if not accepted:  # (a background start whose first died before its record never ran)
                    invocation.prior = prior or _lost_run(invocation, entry)
                if prior is not None and prior.needs_resume:
                    await self._resumed_by(workspace, prior.run_id, invocation.run_id)
                return None
            if accepted:
                raise _in_progress("is being accepted")

    async def _resumed_by(self, workspace: str, run_id: str, by: str) -> None:
        """The record of a run whose open turn a repeat finishes names that repeat (as a resume does)."""
        runs = self.workspaces.runs(workspace)
        found = await runs.read_versioned(run_id)
        if found is None or found[0].resumed_by is not None:
            return
        record, version = found
        record.resumed_by = by
        with contextlib.suppress(StorageConflictError):  # changed meanwhile (settled again): it stays as is
            await runs.replace(record, version)

    async def _holding(
        self, workspace: str, invocation: Invocation, log: EventLog | None, record: RunRecord | None = None
    ) -> RunOutcome:
        """Run an invocation that has its session, and hand the session on when it ends."""
        assert invocation.session_id is not None
        try:
            return await self.executor.execute(workspace, invocation, log, record)
        finally:
            await self.background.release(
                workspace, invocation.hosted.id, invocation.session_id, invocation.run_id
            )

    async def _plain(self, workspace: str, invocation: Invocation, log: EventLog | None) -> RunOutcome:
        """Run an invocation with ``reject``: its session is taken on this server only."""
        assert invocation.session_id is not None
        agent_id, session_id = invocation.hosted.id, invocation.session_id
        queues = self.workspaces.queues(workspace)
        plain = queues.hold_plain(agent_id, session_id, invocation.run_id)
        invocation.held_here = invocation.keeps_agent = True
        try:
            return await self.executor.execute(workspace, invocation, log)
        finally:
            with anyio.CancelScope(shield=True):
                if await queues.end_plain(agent_id, session_id, plain):
                    await self.background.release(workspace, agent_id, session_id, invocation.run_id)

    async def _in_line(self, workspace: str, invocation: Invocation, log: EventLog | None) -> RunOutcome:
        """Run an ``enqueue`` invocation: after the ones that came before it on this server, it takes its
        session in the busy document, or its place in the session's queue there and waits here for its
        turn (``SessionQueues.enter``), so that a message to any server meanwhile waits behind it."""
        assert invocation.session_id is not None
        agent_id, session_id = invocation.hosted.id, invocation.session_id
        queues = self.workspaces.queues(workspace)
        async with queues.in_line(agent_id, session_id):
            waiter = await queues.enter(agent_id, session_id, invocation.run_id)
        try:
            after_mine = await queues.wait_turn(agent_id, session_id, waiter, self.config.runs.poll_s)
        except BaseException:
            if waiter.handed.is_set():  # handed the session as it was cancelled: hand it on
                await self.background.release(workspace, agent_id, session_id, invocation.run_id)
            raise
        if not after_mine:  # another server's run had the session since this server's last turn
            self.builder.forget(workspace, agent_id, session_id)
        invocation.keeps_agent = True
        return await self._holding(workspace, invocation, log)

    async def _queue_and_wait(self, workspace: str, invocation: Invocation) -> RunOutcome:
        """A plain request whose session is busy and whose policy lets it wait: its run is queued like a
        background one (any server may start it), and the request answers when it ends."""
        record = await self.background.start(workspace, invocation)
        final = await self.reader.wait_final(workspace, record.run_id)
        return final, recorded_failure(final)


def _in_progress(what: str) -> KeyRefused:
    return KeyRefused(
        409,
        "request_in_progress",
        f"the first request with this Idempotency-Key {what}; repeat it after Retry-After seconds to get "
        "its answer",
        retry_after=1,
    )


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
