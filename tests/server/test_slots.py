"""The busy document's waiters (``slots.py``), between two servers' slots on one storage, in this process."""

from __future__ import annotations

import anyio

from orchestra.hosting.liveness import Liveness
from orchestra.hosting.session_queue import Holder, SessionQueues
from orchestra.storage import InMemoryStorage
from orchestra.testing import FaultyStorage


async def test_a_waiter_whose_read_of_the_document_fails_waits_on():
    storage = FaultyStorage(InMemoryStorage())
    servers = [Liveness(storage, every_s=0.05, gone_after_s=30) for _ in range(2)]
    for liveness in servers:
        await liveness.start()
    try:
        one, two = (SessionQueues(storage, liveness, max_queue=5) for liveness in servers)
        first = await one.enter("chat", "s1", "r1")
        assert first.handed.is_set()
        second = await two.enter("chat", "s1", "r2")
        assert not second.handed.is_set()  # queued behind r1, which runs on the other server
        storage.fail("read", key_contains="busy/", kind="unavailable")
        turn: list[bool] = []

        async def wait() -> None:
            turn.append(await two.wait_turn("chat", "s1", second, every_s=0.01))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait)
            for _ in range(1000):  # until its read has failed once
                if not storage.faults:
                    break
                await anyio.sleep(0.01)
            assert not storage.faults
            assert await one.release("chat", "s1", "r1") is None  # a waiter of the other server: it reads it
        assert turn == [False]  # it has the session; the run before it was the other server's
        state, _ = await two.read("chat", "s1")
        assert state.active == Holder("r2", servers[1].server_id)
    finally:
        for liveness in servers:
            await liveness.stop()
