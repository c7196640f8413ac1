"""Background runs: started over HTTP (202), run by any server on the storage, never ``executing`` forever.

- ``queue_run`` writes a run's record (``queued``, durably, with all it needs to run) and gives it its
  session or its place in the session's queue (``slots.py``); a run without a session starts at once.
- ``drive`` runs a record on this server: it marks it ``executing`` here by compare-and-swap (so two
  servers never both start it), runs it with its events going to its log (``events.py``), writes the
  final record durably, hands the session to the next queued run, and calls the run's webhook.
- ``Background`` keeps the tasks: the runs started here, the stop-request watcher (``signals.py``), and a
  sweep every ``runs.sweep_s`` over the workspace's unfinished background runs (``active-runs/``):

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
from typing import TYPE_CHECKING, Any

import anyio

from orchestra._logging import get_logger
from orchestra.errors import OrchestraError, StorageConflictError, StorageError
from orchestra.hosting.events import EventLog
from orchestra.hosting.runs import RunRecord, RunStore
from orchestra.hosting.settle import settle_from_session
from orchestra.hosting.signals import StopMode, StopRequest
from orchestra.hosting.slots import Busy, Holder
from orchestra.hosting.turns import terminal_event
from orchestra.hosting.webhooks import Webhooks

if TYPE_CHECKING:
    from orchestra.hosting.config import HostedSpec
    from orchestra.hosting.runtime import Invocation, Runtime

__all__ = [
    "Background",
    "NotResumable",
    "cancel_run",
    "cancellable",
    "drive",
    "queue_run",
    "resume_run",
    "start_background",
]

log = get_logger("orchestra.server")


async def queue_run(runtime: Runtime, workspace: str, invocation: Invocation) -> RunRecord:
    """Write a background run's record and claim its session. The record says ``executing`` when the run
    may start now (the caller starts it with ``drive``), ``queued`` when it waits.

    Raises:
        Busy: the session is busy and the policy is ``reject`` (409), or its queue is full (429); nothing
            is left of the run.
    """
    record = runtime.record_of(invocation)
    record.status, record.background = "queued", True
    if invocation.mode == "stateless":
        record.caller_messages = invocation.history  # until it ends, so that any server can run it
    runs = runtime.runs(workspace)
    await runs.save(record)
    await runs.mark_active(record.run_id)
    await _log(runtime, workspace, record.run_id).write_now([("status", {"status": "queued"})])
    if invocation.session_id is None:
        record.status = "executing"
        return record
    holder = Holder(record.run_id, runtime.liveness.server_id, background=True)
    try:
        queued = await runtime.slots(workspace).acquire(
            invocation.hosted.id, invocation.session_id, holder, invocation.on_busy
        )
    except Busy:
        await runs.unmark_active(record.run_id)
        await runs.delete(record)
        await runtime.unsynced(workspace).delete_prefix(f"events/{record.run_id}/")
        raise
    if queued is None:
        record.status = "executing"
        return record
    if queued.stop is not None:
        record.supersedes = queued.stop
        await runs.save(record)
        mode: StopMode = "rollback" if invocation.on_busy == "rollback" else "interrupt"
        await runtime.stops.request(runtime.storage(workspace), queued.stop, StopRequest(mode, record.run_id))
    return record


async def start_background(runtime: Runtime, workspace: str, invocation: Invocation) -> RunRecord:
    """Queue a background run (``queue_run``) and start it here at once when its session is free (an
    app driven without its lifespan has no background tasks: the run then runs before this returns)."""
    invocation.background = True
    record = await queue_run(runtime, workspace, invocation)
    if record.status == "executing":
        if runtime.launch is not None:
            runtime.launch(workspace, record.run_id)
        else:
            await drive(runtime, workspace, record.run_id)
    return record


class NotResumable(Exception):
    """A run that ``resume_run`` cannot start again (409): the message says why."""


async def resume_run(runtime: Runtime, workspace: str, record: RunRecord, hosted: HostedSpec) -> RunRecord:
    """Start a run that was cancelled, failed, or left ``needs_resume`` again, as a new background run on
    its session (queued behind what runs there): a pipeline goes on from its saved nodes, an agent's
    turn runs again. The old record names the new run (``resumed_by``).

    Raises:
        NotResumable: the run has not ended, completed, was rolled back, waits for interrupt answers,
            was stateless, answered interrupts, or was resumed already.
    """
    from orchestra.hosting.runtime import Invocation

    run_id = record.run_id
    if not record.final or record.status in ("completed", "rolled_back"):
        raise NotResumable(f"run {run_id} is {record.status}: there is nothing to resume")
    if record.interrupts:
        raise NotResumable(f"run {run_id} waits for answers to its interrupts: send responses instead")
    if record.mode == "stateless":
        raise NotResumable(f"run {run_id} was stateless: it kept no history to resume from; start it again")
    if record.resumed_by is not None:
        raise NotResumable(f"run {run_id} was resumed already, by run {record.resumed_by}")
    if not isinstance(record.input, str) and not record.resume:
        raise NotResumable(f"run {run_id} answered interrupts: answer the session's open ones instead")
    invocation = Invocation(hosted, record.input, record.session_id, None, on_busy="enqueue")
    # An agent's turn that stopped with part of it stored (kept open after a side-effecting tool) is
    # finished from the session, not sent again (a pipeline's saved nodes are resumed by its task).
    invocation.resume = record.kind == "agent" and (record.stored is True or record.resume)
    # The old record names its resumption before it starts, by compare-and-swap: of two resumes at once
    # (a client's retry, two users) one starts a run, the other is refused; never two runs of one turn.
    runs = runtime.runs(workspace)
    await runtime.flush_records(workspace)  # a plain run's final record may still wait to be written
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
        return await start_background(runtime, workspace, invocation)
    except BaseException:
        with anyio.CancelScope(shield=True), contextlib.suppress(OrchestraError):
            old.resumed_by = None  # nothing started: the run can be resumed again
            await runs.replace(old, claimed)
        raise


def _log(runtime: Runtime, workspace: str, run_id: str) -> EventLog:
    return EventLog(runtime.unsynced(workspace), run_id, runtime.config.runs.max_events)


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


async def drive(runtime: Runtime, workspace: str, run_id: str) -> None:
    """Run a background run's record on this server (see the module docstring)."""
    runs, me, webhooks = runtime.runs(workspace), runtime.liveness.server_id, runtime.webhooks
    found = await runs.read_versioned(run_id)
    if found is None:
        return
    record, version = found
    if record.final:  # it ended meanwhile: hand its session on if this server holds it, and its webhook
        if record.session_id is not None:
            await runtime.release(workspace, record.agent_id, record.session_id, run_id)
        await _deliver(runtime, workspace, record, webhooks)
        return
    hosted = next((h for h in runtime.config.agents if h.id == record.agent_id), None)
    if hosted is None or hosted.workspace != workspace:
        await _needs_resume(runtime, workspace, record, version, "its agent is no longer hosted", webhooks)
        return
    taken_over = record.status == "executing"
    # Taken over only from a server that is gone, never from a live one, this one included (a sweep and
    # the run's own start may both get here).
    if taken_over and await runtime.liveness.is_alive(record.server):
        return
    prior = record.model_copy(deep=True)
    record.status, record.server = "executing", me
    record.attempt += 1 if taken_over else 0
    try:
        version = await runs.replace(record, version)
    except StorageConflictError:
        return  # another server started it first
    from orchestra.hosting.runtime import Invocation

    invocation = Invocation.of_record(hosted, record)
    if taken_over:
        invocation.prior = prior  # a turn the gone server stored is settled, not run again
    events = await EventLog.resume(runtime.unsynced(workspace), run_id, runtime.config.runs.max_events)
    events.append("status", {"status": "executing", "attempt": record.attempt, "server": me})
    final, _ = await runtime.execute(workspace, invocation, events, record)
    if final.webhook:
        final.webhook_delivery = "pending"
    if not await _save_durably(runs, final, version):
        # Another server took the run over meanwhile (this one was taken for gone): the run is its now.
        log.warning("run_taken_over_while_running", run_id=run_id)
        return
    if final.session_id is not None:
        await runtime.release(workspace, final.agent_id, final.session_id, run_id)
    await _deliver(runtime, workspace, final, webhooks)


async def _deliver(runtime: Runtime, workspace: str, record: RunRecord, webhooks: Webhooks) -> None:
    """Call an ended run's webhook if it is still pending, then drop it from the sweeps' list."""
    runs = runtime.runs(workspace)
    if record.webhook and record.webhook_delivery == "pending":
        delivered = await webhooks.deliver(record.webhook, record.run_id, _payload(record))
        record.webhook_delivery = "delivered" if delivered else "failed"
        await _save_durably(runs, record)
    with contextlib.suppress(StorageError):
        await runs.unmark_active(record.run_id)
    runtime.notify(record.run_id)


def _payload(record: RunRecord) -> dict[str, Any]:
    return {
        **record.answer(),
        "agent_id": record.agent_id,
        "error": record.error,
        "error_code": record.error_code,
        "finished_at": record.finished_at,
    }


async def _end(runtime: Runtime, workspace: str, record: RunRecord, version: str, webhooks: Webhooks) -> bool:
    """Write a run that ends without running here (cancelled while queued, or left for a resume): its
    record, its last event, the session handed on, its webhook. False if another server changed it."""
    record.finished_at = record.finished_at or datetime.now(UTC).isoformat()
    if record.webhook:
        record.webhook_delivery = "pending"
    try:
        await runtime.runs(workspace).replace(record, version)
    except StorageConflictError:
        return False
    events = await EventLog.resume(runtime.unsynced(workspace), record.run_id, runtime.config.runs.max_events)
    await events.write_now([terminal_event(record, None)])
    if record.session_id is not None:
        await runtime.release(workspace, record.agent_id, record.session_id, record.run_id, for_gone=True)
    await _deliver(runtime, workspace, record, webhooks)
    return True


async def _needs_resume(
    runtime: Runtime, workspace: str, record: RunRecord, version: str, why: str, webhooks: Webhooks
) -> None:
    """No server can go on with the run: settle it from its session (a stored turn stands), else end it
    ``interrupted`` and waiting for a resume."""
    settled = record
    if record.agent_id in runtime.config.loaded and record.mode == "session":
        storage = runtime.agent_storage(workspace, record.agent_id)
        settled = await settle_from_session(runtime.config, storage, record, why)
        if settled.status == "completed":
            await _end(runtime, workspace, settled, version, webhooks)
            return
    record.status, record.needs_resume, record.stored = "interrupted", True, settled.stored
    record.error = f"{why}; POST /api/v1/runs/{record.run_id}/resume starts it again"
    record.settled, record.interrupts = why, []
    await _end(runtime, workspace, record, version, webhooks)


async def cancel_run(runtime: Runtime, workspace: str, record: RunRecord, webhooks: Webhooks) -> None:
    """Stop a run: a queued one leaves its queue and ends ``interrupted`` (nothing ran); a running one,
    here or on another server, is asked to stop (``signals.py``)."""
    if record.status == "queued" and record.session_id is not None:
        slots = runtime.slots(workspace)
        if await slots.remove(record.agent_id, record.session_id, record.run_id):
            found = await runtime.runs(workspace).read_versioned(record.run_id)
            if found is not None:
                ended, version = found
                ended.status, ended.stored = "interrupted", False
                ended.stopped = StopRequest("cancel").to_json() | {"note": "cancelled before it started"}
                await _end(runtime, workspace, ended, version, webhooks)
            return
    await runtime.stops.request(runtime.storage(workspace), record.run_id, StopRequest("cancel"))


def cancellable(record: RunRecord) -> bool:
    """Whether ``cancel_run`` can stop it: a background run, or a run of a session (a plain invoke
    without a session stops when its client goes away)."""
    return record.background or record.mode == "session"


class Background:
    """The tasks of background runs on this server (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.webhooks = runtime.webhooks
        self._group: anyio.abc.TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run background work while the app serves (the lifespan); on exit the runs started here stop
        where they are, and the servers that remain take them over."""
        async with anyio.create_task_group() as group:
            self._group = group
            self.runtime.launch = self.launch
            group.start_soon(self.runtime.stops.watch)
            group.start_soon(self._sweep_forever)
            try:
                yield
            finally:
                self.runtime.launch = None
                self._group = None
                group.cancel_scope.cancel()

    def launch(self, workspace: str, run_id: str) -> None:
        """Start ``run_id`` on this server, in the background."""
        if self._group is not None:
            self._group.start_soon(self._drive, workspace, run_id)

    async def _drive(self, workspace: str, run_id: str) -> None:
        try:
            await drive(self.runtime, workspace, run_id)
        except (OrchestraError, OSError) as exc:  # the run's storage failed: a sweep comes back to it
            log.warning("background_run_failed", run_id=run_id, error=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # never let one run take down the others
            log.error("background_run_failed", run_id=run_id, exc_info=exc)

    async def _sweep_forever(self) -> None:
        while True:
            await anyio.sleep(self.runtime.config.runs.sweep_s)
            for workspace in sorted({h.workspace for h in self.runtime.config.agents}):
                try:
                    await self.sweep(workspace)
                except (OrchestraError, OSError) as exc:
                    log.warning("sweep_failed", workspace=workspace, error=f"{type(exc).__name__}: {exc}")

    async def _clear_late_stops(self, workspace: str) -> None:
        """Stop requests that reached a run after it ended (or that named no run) are deleted."""
        storage = self.runtime.storage(workspace)
        for key in await storage.list("signals/"):
            run_id = key.rsplit("/", 1)[-1].removesuffix(".json")
            if self.runtime.runs_here(run_id):
                continue
            record = await self.runtime.runs(workspace).get(run_id)
            if record is None or record.final:
                await self.runtime.stops.clear(storage, run_id)

    async def sweep(self, workspace: str) -> None:
        """Look after the workspace's unfinished background runs once (see the module docstring)."""
        runtime = self.runtime
        runs, liveness = runtime.runs(workspace), runtime.liveness
        await runtime.retry_releases()
        await self._clear_late_stops(workspace)
        for run_id in await runs.active_ids():
            if runtime.runs_here(run_id):
                continue
            found = await runs.read_versioned(run_id)
            if found is None:
                await runs.unmark_active(run_id)
                continue
            record, version = found
            if record.final:
                if record.webhook_delivery != "pending":
                    await runs.unmark_active(run_id)
                elif not await liveness.is_alive(record.server):
                    self.launch(workspace, run_id)  # delivers the webhook its server did not
                continue
            alive = await liveness.is_alive(record.server)
            if record.status == "executing" and alive:
                continue
            if record.status == "executing" and (
                record.attempt >= runtime.config.runs.max_attempts
                or record.agent_id not in runtime.config.loaded
            ):
                why = (
                    f"its server stopped and it was started {record.attempt} times (runs.max_attempts)"
                    if record.agent_id in runtime.config.loaded
                    else "its agent is no longer hosted"
                )
                await _needs_resume(runtime, workspace, record, version, why, self.webhooks)
                continue
            if record.session_id is None:
                if record.status == "executing" or not alive:
                    self.launch(workspace, run_id)
                continue
            # A queued run of a live server is in its session's document, or on its way there.
            start = await runtime.slots(workspace).recover(
                record.agent_id, record.session_id, run_id, lost=not alive
            )
            if start is not None:
                self.launch(workspace, start)
