"""Following a run's events: from its log in this process while it runs here, else from storage."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio

from orchestra._logging import get_logger
from orchestra.errors import SnapshotError, StorageError
from orchestra.hosting.events import TERMINAL, Event, EventLog, stored_events
from orchestra.hosting.idempotency import KeyRefused
from orchestra.hosting.slots import Busy

if TYPE_CHECKING:
    from orchestra.hosting.runtime import Invocation, Runtime

__all__ = ["follow_run", "run_here", "runtime_events"]

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


async def run_here(
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


async def runtime_events(
    runtime: Runtime, workspace: str, invocation: Invocation
) -> AsyncIterator[tuple[str, Any]]:
    """``Runtime.stream``: the run's events as ``(name, data)`` once kept, then ``("result", record)``
    or ``("error", (record, failure))``. A refusal before the run (``KeyRefused``, ``Busy``) is raised."""
    outcome: list[Any] = []
    async with aclosing(run_here(runtime, workspace, invocation, outcome)) as run_events_here:
        async for _, name, data in run_events_here:
            if name not in TERMINAL:  # the last event comes from the record, below
                yield name, data
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    record, failure = result
    yield ("result", record) if failure is None else ("error", (record, failure))
