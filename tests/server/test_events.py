"""A run's event log (server/events.py): ids that name one event everywhere, a writer that another
writer's chunk cannot make lie, and followers that end when the writer stops."""

from __future__ import annotations

import anyio
import anyio.lowlevel

from orchestra.hosting.events import EventLog, last_event, stored_events
from orchestra.storage import InMemoryStorage
from orchestra.testing import FaultyStorage


async def read_all(storage, run_id: str, after: int = 0) -> list[tuple[int, str, dict]]:
    return [event async for event in stored_events(storage, run_id, after)]


async def test_events_are_numbered_written_then_followed_in_order():
    storage = InMemoryStorage()
    log = EventLog(storage, "r1", max_events=100)
    followed: list[tuple[int, str, dict]] = []

    async def follow() -> None:
        async for event in log.follow(0):
            followed.append(event)

    async with anyio.create_task_group() as group:
        group.start_soon(log.run_writer)
        group.start_soon(follow)
        for index in range(5):
            log.append("text", {"text": str(index)})
            await anyio.lowlevel.checkpoint()
        log.append("result", {"status": "completed"})
        await log.close()
    assert [e[0] for e in followed] == [1, 2, 3, 4, 5, 6]
    assert followed == await read_all(storage, "r1")
    assert await read_all(storage, "r1", after=4) == followed[4:]
    assert (await last_event(storage, "r1"))[1] == "result"


async def test_a_second_writer_continues_after_the_first_and_a_stale_one_is_renumbered():
    storage = InMemoryStorage()
    first = EventLog(storage, "r1", max_events=100)
    await first.write_now([("status", {"status": "executing", "attempt": 1})])
    taken_over = await EventLog.resume(storage, "r1", max_events=100)  # a server that took the run over
    await taken_over.write_now([("status", {"status": "executing", "attempt": 2})])
    await first.write_now([("text", {"text": "from the stale writer"})])  # its chunk number was taken
    events = await read_all(storage, "r1")
    assert [e[0] for e in events] == [1, 2, 3]  # no id names two events
    assert [e[2].get("attempt") for e in events] == [1, 2, None]


async def test_past_the_bound_only_lifecycle_events_are_kept():
    storage = InMemoryStorage()
    log = EventLog(storage, "r1", max_events=10)
    async with anyio.create_task_group() as group:
        group.start_soon(log.run_writer)
        for index in range(30):
            if index % 10 == 0:
                log.append("node_start", {"node_id": f"n{index}"})
            log.append("text", {"text": str(index)})
        log.append("result", {"status": "completed"})
        await log.close()
    names = [name for _, name, _ in await read_all(storage, "r1")]
    assert names.index("truncated") == 9
    assert names[10:] == ["node_start", "node_start", "result"]  # lifecycle only, then the last event


async def test_a_writer_that_gives_up_ends_its_followers_and_a_passing_failure_loses_nothing():
    storage = FaultyStorage(InMemoryStorage())
    storage.fail("write", "events/r1/", nth=1)  # one failure: tried again
    log = EventLog(storage, "r1", max_events=100)
    async with anyio.create_task_group() as group:
        group.start_soon(log.run_writer)
        log.append("text", {"text": "a"})
        log.append("result", {"status": "completed"})
        await log.close()
    assert [name for _, name, _ in await read_all(storage, "r1")] == ["text", "result"]

    down = FaultyStorage(InMemoryStorage())
    for _ in range(10):
        down.fail("write", "events/r2/")
    stuck = EventLog(down, "r2", max_events=100)
    followed = []

    async def follow() -> None:
        async for event in stuck.follow(0):
            followed.append(event)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(stuck.run_writer)
            group.start_soon(follow)
            stuck.append("text", {"text": "never written"})
            await stuck.close()
    assert stuck.closed
    assert followed == []  # nothing unwritten was ever sent
