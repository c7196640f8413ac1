"""Server-sent events of runs: a streamed invoke, and ``GET /api/v1/runs/{id}/stream`` (replay from
``Last-Event-ID``, then follow).

Every event a client gets has the id it has in the run's log (``events.py``), so a client that drops
its connection reconnects with the last id it saw, to any server on the storage, during the run or after
it, and gets each event it missed exactly once, in order, then the run's last event (``result`` or
``error``). A run that kept no events (a plain invoke) streams only that last event, without an id.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio

from orchestra._logging import get_logger
from orchestra.errors import SnapshotError, StorageError
from orchestra.server.events import TERMINAL, Event, EventLog, last_event, sse, stored_events
from orchestra.server.idempotency import KeyRefused
from orchestra.server.outcomes import failure_of
from orchestra.server.slots import Busy
from orchestra.server.turns import recorded_failure, terminal_event

if TYPE_CHECKING:
    from orchestra.server.runtime import Invocation, Runtime

__all__ = ["follow_run", "invoke_events", "run_events", "runtime_events"]

log = get_logger("orchestra.server")


async def follow_run(
    runtime: Runtime,
    workspace: str,
    run_id: str,
    after: int,
    ended: Callable[[], Awaitable[bool]],
    settle_rounds: int = 2,
) -> AsyncIterator[Event]:
    """The events of ``run_id`` after id ``after``, then new ones, up to its terminal event: from the
    run's log in this process while it runs here, else from storage (read every poll). When nothing new
    came for ``settle_rounds`` reads and ``ended()`` says no more will come, it stops (a run's record
    is written final just after its last event, which a read right then may not see yet)."""
    storage = runtime.unsynced(workspace)
    poll_s = min(runtime.config.runs.poll_s, 0.25)
    quiet = 0
    while True:
        local = runtime.logs.get(run_id)
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
        if (log := runtime.logs.get(run_id)) is not None and not log.closed:
            continue
        with anyio.move_on_after(poll_s):
            await runtime.changed(run_id).wait()


async def run_events(runtime: Runtime, workspace: str, run_id: str, after: int) -> AsyncIterator[bytes]:
    """``GET /api/v1/runs/{id}/stream``: the run's events after ``after``, then its last event."""

    async def ended() -> bool:
        record = await runtime.run_record(workspace, run_id)
        return record is None or record.final

    try:
        async for event in follow_run(runtime, workspace, run_id, after, ended):
            yield sse(event)
            if event[1] in TERMINAL:
                return
        last = await last_event(runtime.unsynced(workspace), run_id)
        if last is not None and last[1] in TERMINAL:
            return  # the client has the last event already
        # The run ended without a last event in its log (it kept none: a plain invoke).
        record = await runtime.run_record(workspace, run_id)
        if record is not None:
            yield sse((None, *terminal_event(record, recorded_failure(record))))
    except (StorageError, SnapshotError) as exc:
        yield sse(_storage_failed(exc, run_id))


async def _run_here(
    runtime: Runtime, workspace: str, invocation: Invocation, outcome: list[Any]
) -> AsyncGenerator[Event, None]:
    """Run the invocation here with a kept event log and yield its events as they are written; once it
    ends, ``outcome`` holds its result, or the refusal or storage error that ended it. Closing this
    generator early (the client went away) cancels the run."""
    events = EventLog(runtime.unsynced(workspace), invocation.run_id, runtime.config.runs.max_events)
    done = anyio.Event()

    async def run() -> None:
        try:
            outcome.append(await runtime.invoke(workspace, invocation, events))
        except (KeyRefused, Busy, StorageError, SnapshotError) as exc:
            outcome.append(exc)
        finally:
            done.set()
            runtime.notify(invocation.run_id)

    async def ended() -> bool:
        return done.is_set()

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        async for event in follow_run(runtime, workspace, invocation.run_id, 0, ended, settle_rounds=0):
            yield event
        await done.wait()


async def invoke_events(runtime: Runtime, workspace: str, invocation: Invocation) -> AsyncIterator[bytes]:
    """``POST .../invoke?stream=true``: run the invocation here and send its events as they are written.
    The client going away stops the run (as it always did: a plain invoke is tied to its request); a
    background run is not. A repeated Idempotency-Key gets only the first run's last event."""
    outcome: list[Any] = []
    async with aclosing(_run_here(runtime, workspace, invocation, outcome)) as run_events_here:
        async for event in run_events_here:
            yield sse(event)
    await runtime.flush_records(workspace)
    if not outcome:
        return
    result = outcome[0]
    if isinstance(result, tuple):
        record, failure = result
        if record.run_id != invocation.run_id:  # a repeat, answered from the first run
            yield sse((None, *terminal_event(record, failure)))
        return
    if isinstance(result, KeyRefused | Busy):
        retry = getattr(result, "retry_after", None) or (1 if isinstance(result, Busy) else None)
        yield sse(_error_event(result.code, result.message, None, retry))
        return
    yield sse(_storage_failed(result, invocation.run_id))


def _error_event(
    code: str, message: str, run_id: str | None, retry_after: float | None = None
) -> tuple[None, str, Any]:
    """A stream's last event when the run could not be had: the error a plain request would get."""
    detail: dict[str, Any] = {"code": code, "message": message}
    if retry_after:
        detail["retry_after"] = retry_after
    return (None, "error", {"error": detail, "run_id": run_id})


def _storage_failed(exc: Exception, run_id: str) -> tuple[None, str, Any]:
    failure = failure_of(exc, run_id)
    log.error("storage_failed", run_id=run_id, error=f"{type(exc).__name__}: {exc}")
    return _error_event(failure.code, failure.message, run_id, failure.retry_after)


async def runtime_events(
    runtime: Runtime, workspace: str, invocation: Invocation
) -> AsyncIterator[tuple[str, Any]]:
    """``Runtime.stream``: the run's events as ``(name, data)`` once kept, then ``("result", record)``
    or ``("error", (record, failure))``. A refusal before the run (``KeyRefused``, ``Busy``) is raised."""
    outcome: list[Any] = []
    async with aclosing(_run_here(runtime, workspace, invocation, outcome)) as run_events_here:
        async for _, name, data in run_events_here:
            if name not in TERMINAL:  # the last event comes from the record, below
                yield name, data
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    record, failure = result
    yield ("result", record) if failure is None else ("error", (record, failure))
