"""A run's events as they are kept: a streamed invoke (``events``), a run followed by its id (``follow``),
and a run's events for the protocol doors (``stream``).

Every event a client gets has the id it has in the run's log (``events.py``), so a client that drops
its connection comes back with the last id it saw, to any server on the storage, during the run or
after it, and gets each event it missed exactly once, in order, then the run's last event (``result``
or ``error``). A run that kept no events (a plain invoke) gives only that last event, without an id.
What comes out is ``(id or None, name, JSON data)``: the server writes each as a server-sent event.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import anyio

from orchestra._logging import get_logger
from orchestra.errors import SnapshotError, StorageError
from orchestra.hosting.admission import Admission
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.events import TERMINAL, Event, EventLog, last_event, stored_events
from orchestra.hosting.execution import RunOutcome
from orchestra.hosting.invocation import Invocation
from orchestra.hosting.outcomes import Refused, failure_of, recorded_failure, terminal_event
from orchestra.hosting.reader import RunReader
from orchestra.hosting.running import Running
from orchestra.hosting.workspaces import Workspaces

__all__ = ["StreamEvent", "Streaming"]

log = get_logger("orchestra.server")

StreamEvent = tuple[int | None, str, Any]
"""An event of a stream: its id in the run's log (None: a last event the log does not hold), name, data."""


class Streaming:
    """The event streams of runs (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        workspaces: Workspaces,
        running: Running,
        reader: RunReader,
        admission: Admission,
    ) -> None:
        self.config = config
        self.workspaces = workspaces
        self.running = running
        self.reader = reader
        self.admission = admission

    async def _follow_log(
        self,
        workspace: str,
        run_id: str,
        after: int,
        ended: Callable[[], Awaitable[bool]],
        settle_rounds: int = 2,
    ) -> AsyncIterator[Event]:
        """The events of ``run_id`` after id ``after``, then new ones, up to its terminal event: from the
        run's log in this process while it runs here, else from storage (read every poll). When nothing
        new came for ``settle_rounds`` reads and ``ended()`` says no more will come, it stops (a run's
        record is written final just after its last event, which a read right then may not see yet)."""
        storage = self.workspaces.unsynced(workspace)
        poll_s = min(self.config.runs.poll_s, 0.25)
        quiet = 0
        while True:
            local = self.running.logs.get(run_id)
            if local is not None and not local.closed:
                async for event in local.follow(after):
                    after = event[0]
                    yield event
                    if event[1] in TERMINAL:
                        return
                # Its writer stopped without a last event (it gave up on a failing storage): read storage.
            got = False
            async for event in stored_events(storage, run_id, after):
                got, after = True, event[0]
                yield event
                if event[1] in TERMINAL:
                    return
            quiet = 0 if got else quiet + 1
            if not got and quiet >= settle_rounds and await ended():
                return
            if (kept := self.running.logs.get(run_id)) is not None and not kept.closed:
                continue
            with anyio.move_on_after(poll_s):
                await self.running.changed(run_id).wait()

    async def follow(self, workspace: str, run_id: str, after: int) -> AsyncIterator[StreamEvent]:
        """A run's events after id ``after``, then each new one, on whichever server it runs, then its last
        event (``GET /api/v1/runs/{id}/stream``). A storage failure ends it with an ``error`` event."""

        async def ended() -> bool:
            record = await self.reader.run_record(workspace, run_id)
            return record is None or record.final

        try:
            async for event in self._follow_log(workspace, run_id, after, ended):
                yield event
                if event[1] in TERMINAL:
                    return
            last = await last_event(self.workspaces.unsynced(workspace), run_id)
            if last is not None and last[1] in TERMINAL:
                return  # the client has the last event already
            # The run ended without a last event in its log (it kept none: a plain invoke).
            record = await self.reader.run_record(workspace, run_id)
            if record is not None:
                yield (None, *terminal_event(record, recorded_failure(record)))
        except (StorageError, SnapshotError) as exc:
            yield _storage_failed(exc, run_id)

    async def _run_here(
        self, workspace: str, invocation: Invocation, outcome: list[RunOutcome | Exception]
    ) -> AsyncGenerator[Event, None]:
        """Run the invocation here with a kept event log and yield its events as they are written; once it
        ends, ``outcome`` holds its result, or the refusal or storage error that ended it. Closing this
        generator early (the client went away) cancels the run."""
        unsynced = self.workspaces.unsynced(workspace)
        events = EventLog(unsynced, invocation.run_id, self.config.runs.max_events)
        done = anyio.Event()

        async def run() -> None:
            try:
                outcome.append(await self.admission.invoke(workspace, invocation, events))
            except (Refused, StorageError, SnapshotError) as exc:
                outcome.append(exc)
            finally:
                done.set()
                self.running.notify(invocation.run_id)

        async def ended() -> bool:
            return done.is_set()

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            async for event in self._follow_log(workspace, invocation.run_id, 0, ended, settle_rounds=0):
                yield event
            await done.wait()

    async def events(self, workspace: str, invocation: Invocation) -> AsyncIterator[StreamEvent]:
        """Run the invocation here and give its events as they are written, then its last event (a
        streamed invoke). The caller going away stops the run (as a plain invoke is tied to its request);
        a background run is not. A repeated Idempotency-Key gets only the first run's last event; a
        refusal or a storage failure comes as an ``error`` event."""
        outcome: list[RunOutcome | Exception] = []
        async with aclosing(self._run_here(workspace, invocation, outcome)) as run_events:
            async for event in run_events:
                yield event
        await self.workspaces.runs(workspace).flush()
        if not outcome:
            return
        result = outcome[0]
        if isinstance(result, tuple):
            record, failure = result
            if record.run_id != invocation.run_id:  # a repeat, answered from the first run
                yield (None, *terminal_event(record, failure))
            return
        if isinstance(result, Refused):
            yield _error_event(result.code, result.message, None, result.retry_after)
            return
        yield _storage_failed(result, invocation.run_id)

    async def stream(self, workspace: str, invocation: Invocation) -> AsyncIterator[tuple[str, Any]]:
        """Run an invocation, yielding ``(event name, data)`` as its events are kept; the last is
        ``("result", record)`` or ``("error", (record, failure))`` (what the protocol doors read).

        Raises:
            Refused: as ``Admission.invoke`` (a busy session, a repeated key that cannot be answered).
        """
        outcome: list[RunOutcome | Exception] = []
        async with aclosing(self._run_here(workspace, invocation, outcome)) as run_events:
            async for _, name, data in run_events:
                if name not in TERMINAL:  # the last event comes from the record, below
                    yield name, data
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        record, failure = result
        yield ("result", record) if failure is None else ("error", (record, failure))


def _error_event(
    code: str, message: str, run_id: str | None, retry_after: float | None = None
) -> StreamEvent:
    """A stream's last event when the run could not be had: the error a plain request would get."""
    detail: dict[str, Any] = {"code": code, "message": message}
    if retry_after:
        detail["retry_after"] = retry_after
    return (None, "error", {"error": detail, "run_id": run_id})


def _storage_failed(exc: Exception, run_id: str) -> StreamEvent:
    failure = failure_of(exc, run_id)
    log.error("storage_failed", run_id=run_id, error=f"{type(exc).__name__}: {exc}")
    return _error_event(failure.code, failure.message, run_id, failure.retry_after)
