"""A server's heartbeat (``hosting/liveness.py``), as the other servers on its storage see it."""

from __future__ import annotations

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
