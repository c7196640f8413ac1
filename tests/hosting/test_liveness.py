"""A server's heartbeat (``hosting/liveness.py``), as the other servers on its storage see it."""

from __future__ import annotations

import threading

import anyio

from orchestra.hosting.liveness import Liveness
from orchestra.storage import InMemoryStorage, LocalFileStorage
from orchestra.testing import FaultyStorage


class SlowWrites(LocalFileStorage):
    """Local files whose writes take a while, as on a loaded machine or a remote storage."""

    async def write(self, key, data, *, expect=None):
        await anyio.sleep(0.2)
        return await super().write(key, data, expect=expect)


async def test_a_started_server_is_alive_to_the_others_at_once(tmp_path):
    # Before, the first beat came from the heartbeat's thread after start returned: a run the server took
    # meanwhile looked like a gone server's to the others, which took its session.
    storage = SlowWrites(tmp_path, durable=False)
    one, two = Liveness(storage, every_s=5, gone_after_s=30), Liveness(storage, every_s=5, gone_after_s=30)
    await one.start()
    try:
        assert await two.is_alive(one.server_id)
    finally:
        await one.stop()
    assert not await two.is_alive(one.server_id)  # stopped: gone at once


async def test_a_first_beat_on_a_full_disk_does_not_stop_the_start_and_the_next_beat_says_it(tmp_path):
    storage = FaultyStorage(InMemoryStorage())
    storage.fail("write", "servers/", kind="full")
    one, two = Liveness(storage, every_s=0.05, gone_after_s=30), Liveness(storage, every_s=5, gone_after_s=30)
    await one.start()
    try:
        assert storage.injected  # the first beat failed, and the server started all the same
        for _ in range(1000):  # until a later beat says it
            if await two.is_alive(one.server_id):
                break
            await anyio.sleep(0.01)
        assert await two.is_alive(one.server_id)
    finally:
        await one.stop()


async def test_a_storage_that_hangs_delays_the_start_only_so_long(tmp_path):
    release = threading.Event()

    class Hanging(LocalFileStorage):
        async def write(self, key, data, *, expect=None):
            await anyio.to_thread.run_sync(release.wait)
            return await super().write(key, data, expect=expect)

    storage = Hanging(tmp_path, durable=False)
    one = Liveness(storage, every_s=5, gone_after_s=30, first_beat_s=0.2)
    two = Liveness(storage, every_s=5, gone_after_s=30)
    await one.start()  # returns although the first beat has not been written
    assert not await two.is_alive(one.server_id)
    await one.start()  # a second start starts no second heartbeat
    release.set()
    for _ in range(1000):  # until the held beat lands
        if await two.is_alive(one.server_id):
            break
        await anyio.sleep(0.01)
    await one.stop()
    assert not await two.is_alive(one.server_id)
    assert [p.name for p in (tmp_path / "servers").iterdir() if not p.name.startswith(".")] == []
