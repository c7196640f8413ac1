"""Background runs: started over HTTP (202), run by any server on the storage, never ``executing`` forever.

- ``queue`` writes a run's record (``queued``, durably, with all it needs to run) and gives it its
  session or its place in the session's queue (``session_queue.py``); a run without a session starts at once.
- ``drive`` runs a record on this server: it marks it ``executing`` here by compare-and-swap (so two
  servers never both start it), runs it with its events going to its log (``events.py``), writes the
  final record durably, hands the session to the next queued run, and calls the run's webhook.
- ``release`` hands a session on when its run ends: the next queued run starts here (``launch``), in
  the task group this server runs background work in while it serves (``running``).
- ``takeover.py`` sweeps every ``runs.sweep_s`` over the workspace's unfinished background runs
  (``active-runs/``):

  * a run whose server is gone (``liveness.py``) is taken over: started again here, attempt + 1. An
    agent's turn that the gone server had stored is settled from the session, not run twice; a
    pipeline resumes from its saved nodes; the run's events go on after the last one written;
  * a run started ``runs.max_attempts`` times, or whose agent is no longer hosted, is ended
    ``interrupted`` with ``needs_resume`` (``POST /api/v1/runs/{id}/resume`` starts it again);
  * a queued run whose session's running run died with its server gets the session;
  * an ended run whose webhook was not delivered gets it delivered.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.abc

from orchestra._logging import get_logger
from orchestra.errors import OrchestraError, StorageConflictError, StorageError
from orchestra.hosting.config import HostedSpec, ServerConfig
from orchestra.hosting.events import EventLog
from orchestra.hosting.execution import Executor
from orchestra.hosting.invocation import Invocation
from orchestra.hosting.outcomes import Refused, terminal_event
from orchestra.hosting.records import RunRecord, RunStore
from orchestra.hosting.running import Running
from orchestra.hosting.session_outcome import settle_from_session
from orchestra.hosting.session_queue import Busy, Holder
from orchestra.hosting.stops import StopMode, StopRequest, Stops
from orchestra.hosting.webhooks import Webhooks
from orchestra.hosting.workspaces import Workspaces

__all__ = ["BackgroundRuns", "NotResumable", "cancellable"]

log = get_logger("orchestra.server")


class NotResumable(Refused):
    """A run that ``BackgroundRuns.resume`` cannot start again (409): the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(409, "not_resumable", message)


def cancellable(record: RunRecord) -> bool:
    """Whether ``BackgroundRuns.cancel`` can stop it: a background run, or a run of a session (a plain
    invoke without a session stops when its client goes away)."""
    return record.background or record.mode == "session"


class BackgroundRuns:
    """The background runs of this server, and the hand-over of sessions (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        workspaces: Workspaces,
        running: Running,
        stops: Stops,
        executor: Executor,
        webhooks: Webhooks,
    ) -> None:
        self.config = config
        self.workspaces = workspaces
        self.liveness = workspaces.liveness
        self.running_here = running
        self.stops = stops
        self.executor = executor
        self.webhooks = webhooks
        self._group: anyio.abc.TaskGroup | None = None
        self._unreleased: set[tuple[str, str, str, str]] = set()  # releases to try again

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[anyio.abc.TaskGroup]:
        """Run background work while the app serves (the lifespan), in the task group it yields; on exit
        the runs started here stop where they are, and the servers that remain take them over."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield group
            finally:
                self._group = None
                group.cancel_scope.cancel()

    def launch(self, workspace: str, run_id: str) -> bool:
        """Start ``run_id`` on this server, in the background; False when no background work runs (an
        app driven without its lifespan)."""
        if self._group is None:
            return False
        self._group.start_soon(self._drive, workspace, run_id)
        return True

    async def _drive(self, workspace: str, run_id: str) -> None:
        try:
            await self.drive(workspace, run_id)
        except (OrchestraError, OSError) as exc:  # the run's storage failed: a sweep comes back to it
            log.warning("background_run_failed", run_id=run_id, error=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # never let one run take down the others
            log.error("background_run_failed", run_id=run_id, exc_info=exc)

    async def queue(self, workspace: str, invocation: Invocation) -> RunRecord:
        """Write a background run's record and claim its session. The record says ``executing`` when the
        run may start now (the caller starts it with ``drive``), ``queued`` when it waits.

        Raises:
            Busy: the session is busy and the policy is ``reject`` (409), or its queue is full (429);
                nothing is left of the run.
        """
        record = self.executor.record_of(invocation)
        record.status, record.background = "queued", True
        if invocation.mode == "stateless":
            record.caller_messages = invocation.history  # until it ends, so that any server can run it
        runs = self.workspaces.runs(workspace)
        await runs.save(record)
        await runs.mark_active(record.run_id)
        await self._log(workspace, record.run_id).write_now([("status", {"status": "queued"})])
        if invocation.session_id is None:
            record.status = "executing"
            return record
        holder = Holder(record.run_id, self.liveness.server_id, background=True)
        try:
            queued = await self.workspaces.queues(workspace).acquire(
                invocation.hosted.id, invocation.session_id, holder, invocation.on_busy
            )
        except Busy:
            await runs.unmark_active(record.run_id)
            await runs.delete(record)
            await self.workspaces.unsynced(workspace).delete_prefix(f"events/{record.run_id}/")
            raise
        if queued is None:
            record.status = "executing"
            return record
        if queued.stop is not None:
            record.supersedes = queued.stop
            await runs.save(record)
            mode: StopMode = "rollback" if invocation.on_busy == "rollback" else "interrupt"
            await self.stops.request(
                self.workspaces.storage(workspace), queued.stop, StopRequest(mode, record.run_id)
            )
        return record

    async def start(self, workspace: str, invocation: Invocation) -> RunRecord:
        """Queue a background run (``queue``) and start it here at once when its session is free (an app
        driven without its lifespan has no background tasks: the run then runs before this returns)."""
        invocation.background = True
        record = await self.queue(workspace, invocation)
        if record.status == "executing" and not self.launch(workspace, record.run_id):
            await self.drive(workspace, record.run_id)
        return record

    async def resume(
        self, workspace: str, record: RunRecord, hosted: HostedSpec, *, on_workers: bool = False
    ) -> RunRecord:
        """Start a run that was cancelled, failed, or left ``needs_resume`` again, as a new background run
        on its session (queued behind what runs there): a pipeline goes on from its saved nodes, an
        agent's turn runs again. The old record names the new run (``resumed_by``). ``on_workers``: the
        new run goes to the Temporal workers (``workers.py``), a move.

        Raises:
            NotResumable: the run has not ended, completed, was rolled back, waits for interrupt answers,
                was stateless, answered interrupts, or was resumed already.
        """
        run_id = record.run_id
        if not record.final or record.status in ("completed", "rolled_back"):
            raise NotResumable(f"run {run_id} is {record.status}: there is nothing to resume")
        if record.interrupts:
            raise NotResumable(f"run {run_id} waits for answers to its interrupts: send responses instead")
        if record.mode == "stateless":
            raise NotResumable(
                f"run {run_id} was stateless: it kept no history to resume from; start it again"
            )
        if record.resumed_by is not None:
            raise NotResumable(f"run {run_id} was resumed already, by run {record.resumed_by}")
        if not isinstance(record.input, str) and not record.resume:
            raise NotResumable(f"run {run_id} answered interrupts: answer the session's open ones instead")
        invocation = Invocation(hosted, record.input, record.session_id, None, on_busy="enqueue")
        # An agent's turn that stopped with part of it stored (kept open after a side-effecting tool) is
        # finished from the session, not sent again (a pipeline's saved nodes are resumed by its task).
        invocation.resume = record.kind == "agent" and (record.stored is True or record.resume)
        invocation.owner = record.owner or invocation.owner  # a run resumed (by an admin) stays its owner's
        # With its owner's memory (a record written before it was recorded keeps the caller's).
        if record.owner is not None and "memory_subject" in record.model_fields_set:
            invocation.subject = record.memory_subject
        invocation.on_workers = on_workers
        # The old record names its resumption before it starts, by compare-and-swap: of two resumes at
        # once (a client's retry, two users) one starts a run, the other is refused; never two runs of one
        # turn.
        runs = self.workspaces.runs(workspace)
        await runs.flush()  # a plain run's final record may still wait to be written
        found = await runs.read_versioned(run_id)
        if found is None:
            raise NotResumable(f"run {run_id} has no stored record to resume from yet: try again")
        old, version = found
        if old.resumed_by is not None:
            raise NotResumable(f"run {run_id} was resumed already, by run {old.resumed_by}")
        old.resumed_by = invocation.run_id
        try:
            claimed = await runs.replace(old, version)
        except StorageConflictError:
            raise NotResumable(
                f"run {run_id} changed while this resumed it (resumed by another request?)"
            ) from None
        try:
            return await self.start(workspace, invocation)
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(OrchestraError):
                old.resumed_by = None  # nothing started: the run can be resumed again
                await runs.replace(old, claimed)
            raise

    def _log(self, workspace: str, run_id: str) -> EventLog:
        return EventLog(self.workspaces.unsynced(workspace), run_id, self.config.runs.max_events)

    async def drive(self, workspace: str, run_id: str) -> None:
        """Run a background run's record on this server (see the module docstring)."""
        runs, me = self.workspaces.runs(workspace), self.liveness.server_id
        found = await runs.read_versioned(run_id)
        if found is None:
            return
        record, version = found
        if record.final:  # it ended meanwhile: hand its session on if this server holds it, and its webhook
            if record.session_id is not None:
                await self.release(workspace, record.agent_id, record.session_id, run_id)
            await self.deliver(workspace, record)
            return
        hosted = next((h for h in self.config.agents if h.id == record.agent_id), None)
        if hosted is None or hosted.workspace != workspace:
            await self.needs_resume(workspace, record, version, "its agent is no longer hosted")
            return
        taken_over = record.status == "executing"
        # Taken over only from a server that is gone, never from a live one, this one included (a sweep
        # and the run's own start may both get here).
        if taken_over and await self.liveness.is_alive(record.server):
            return
        prior = record.model_copy(deep=True)
        record.status, record.server = "executing", me
        record.attempt += 1 if taken_over else 0
        try:
            version = await runs.replace(record, version)
        except StorageConflictError:
            return  # another server started it first
        invocation = Invocation.of_record(hosted, record)
        if taken_over:
            invocation.prior = prior  # a turn the gone server stored is settled, not run again
        unsynced = self.workspaces.unsynced(workspace)
        events = await EventLog.resume(unsynced, run_id, self.config.runs.max_events)
        events.append("status", {"status": "executing", "attempt": record.attempt, "server": me})
        final, _ = await self.executor.execute(workspace, invocation, events, record)
        if final.webhook:
            final.webhook_delivery = "pending"
        if not await _save_durably(runs, final, version):
            # Another server took the run over meanwhile (this one was taken for gone): the run is its now.
            log.warning("run_taken_over_while_running", run_id=run_id)
            return
        if final.session_id is not None:
            await self.release(workspace, final.agent_id, final.session_id, run_id)
        await self.deliver(workspace, final)

    async def release(
        self, workspace: str, agent_id: str, session_id: str, run_id: str, *, for_gone: bool = False
    ) -> None:
        """``run_id`` no longer runs: the next queued run of the session starts here. A release that
        fails is logged: the session's document then names a run this process does not run, which the
        next message (or a sweep) takes as ended."""
        with anyio.CancelScope(shield=True):
            try:
                head = await self.workspaces.queues(workspace).release(
                    agent_id, session_id, run_id, for_gone=for_gone
                )
            except StorageError as exc:
                log.warning("session_not_released", session_id=session_id, run_id=run_id, error=str(exc))
                self._unreleased.add((workspace, agent_id, session_id, run_id))
                return
            self._unreleased.discard((workspace, agent_id, session_id, run_id))
            if head is not None and not self.launch(workspace, head.run_id):
                log.warning(
                    "queued_run_not_started",
                    run_id=head.run_id,
                    reason="the background runner is not running",
                )

    async def retry_releases(self) -> None:
        """Try again the releases whose storage failed (a sweep calls it)."""
        for workspace, agent_id, session_id, run_id in sorted(self._unreleased):
            await self.release(workspace, agent_id, session_id, run_id)

    async def deliver(self, workspace: str, record: RunRecord) -> None:
        """Call an ended run's webhook if it is still pending, then drop it from the sweeps' list."""
        runs = self.workspaces.runs(workspace)
        if record.webhook and record.webhook_delivery == "pending":
            delivered = await self.webhooks.deliver(record.webhook, record.run_id, _payload(record))
            record.webhook_delivery = "delivered" if delivered else "failed"
            await _save_durably(runs, record)
        with contextlib.suppress(StorageError):
            await runs.unmark_active(record.run_id)
        self.running_here.notify(record.run_id)

    async def _end(self, workspace: str, record: RunRecord, version: str) -> bool:
        """Write a run that ends without running here (cancelled while queued, or left for a resume): its
        record, its last event, the session handed on, its webhook. False if another server changed it."""
        record.finished_at = record.finished_at or datetime.now(UTC).isoformat()
        if record.webhook:
            record.webhook_delivery = "pending"
        try:
            await self.workspaces.runs(workspace).replace(record, version)
        except StorageConflictError:
            return False
        unsynced = self.workspaces.unsynced(workspace)
        events = await EventLog.resume(unsynced, record.run_id, self.config.runs.max_events)
        await events.write_now([terminal_event(record, None)])
        if record.session_id is not None:
            await self.release(workspace, record.agent_id, record.session_id, record.run_id, for_gone=True)
        await self.deliver(workspace, record)
        return True

    async def needs_resume(self, workspace: str, record: RunRecord, version: str, why: str) -> None:
        """No server can go on with the run: settle it from its session (a stored turn stands), else end
        it ``interrupted`` and waiting for a resume."""
        settled = record
        if record.agent_id in self.config.loaded and record.mode == "session":
            storage = self.workspaces.agent_storage(workspace, record.agent_id)
            settled = await settle_from_session(self.config, storage, record, why)
            if settled.status == "completed":
                await self._end(workspace, settled, version)
                return
        record.status, record.needs_resume, record.stored = "interrupted", True, settled.stored
        record.error = f"{why}; POST /api/v1/runs/{record.run_id}/resume starts it again"
        record.settled, record.interrupts = why, []
        await self._end(workspace, record, version)

    async def cancel(self, workspace: str, record: RunRecord) -> None:
        """Stop a run: a queued one leaves its queue and ends ``interrupted`` (nothing ran); a running one,
        here or on another server, is asked to stop (``stops.py``)."""
        if record.status == "queued" and record.session_id is not None:
            queues = self.workspaces.queues(workspace)
            if await queues.remove(record.agent_id, record.session_id, record.run_id):
                found = await self.workspaces.runs(workspace).read_versioned(record.run_id)
                if found is not None:
                    ended, version = found
                    ended.status, ended.stored = "interrupted", False
                    ended.stopped = StopRequest("cancel").to_json() | {"note": "cancelled before it started"}
                    await self._end(workspace, ended, version)
                return
        await self.stops.request(self.workspaces.storage(workspace), record.run_id, StopRequest("cancel"))


async def _save_durably(runs: RunStore, record: RunRecord, version: str | None = None) -> bool:
    """Write a final record, trying again until it is written (a run is never left ``executing`` by a
    storage that fails for a while). With ``version``, only over that version: False if another server
    changed the record first (it took the run over, taking this server for gone)."""
    wait = 0.5
    while True:
        try:
            if version is None:
                await runs.save(record)
            else:
                await runs.replace(record, version)
            return True
        except StorageConflictError:
            return False
        except StorageError as exc:
            log.warning("run_record_not_written", run_id=record.run_id, error=str(exc))
            await anyio.sleep(wait)
            wait = min(wait * 2, 30.0)


def _payload(record: RunRecord) -> dict[str, Any]:
    return {
        **record.answer(),
        "agent_id": record.agent_id,
        "error": record.error,
        "error_code": record.error_code,
        "finished_at": record.finished_at,
    }
