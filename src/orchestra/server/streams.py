"""Server-sent events of runs: a streamed invoke, and ``GET /api/v1/runs/{id}/stream`` (replay from
``Last-Event-ID``, then follow).

Every event a client gets has the id it has in the run's log, so a client that drops its connection
reconnects with the last id it saw, to any server on the storage, during the run or after it, and gets
each event it missed exactly once, in order, then the run's last event (``result`` or ``error``). A run
that kept no events (a plain invoke) streams only that last event, without an id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from orchestra._json import dumps
from orchestra._logging import get_logger
from orchestra.errors import SnapshotError, StorageError
from orchestra.hosting.events import TERMINAL, Event, last_event
from orchestra.hosting.idempotency import KeyRefused
from orchestra.hosting.outcomes import failure_of
from orchestra.hosting.runtime import Invocation, Runtime
from orchestra.hosting.slots import Busy
from orchestra.hosting.streams import follow_run, run_here
from orchestra.hosting.turns import recorded_failure, terminal_event

__all__ = ["invoke_events", "run_events", "sse"]

log = get_logger("orchestra.server")


def sse(event: Event | tuple[None, str, Any]) -> bytes:
    """An event as server-sent-event text (with its ``id:`` when it has one)."""
    event_id, name, data = event
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {dumps(data, lenient=True)}\n\n".encode()


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


async def invoke_events(runtime: Runtime, workspace: str, invocation: Invocation) -> AsyncIterator[bytes]:
    """``POST .../invoke?stream=true``: run the invocation here and send its events as they are written.
    The client going away stops the run (as it always did: a plain invoke is tied to its request); a
    background run is not. A repeated Idempotency-Key gets only the first run's last event."""
    outcome: list[Any] = []
    async with aclosing(run_here(runtime, workspace, invocation, outcome)) as run_events_here:
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
