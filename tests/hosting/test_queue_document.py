"""A session's busy document as stored (``hosting/queue_document.py``): a line appended per change on local
files, on the condition that the document is as the server last saw it; written whole past
``COMPACT_AT``, on other storages, and after a power cut left its end torn."""

from __future__ import annotations

import pytest

from orchestra.hosting.liveness import Liveness
from orchestra.hosting.queue_document import COMPACT_AT, Holder, QueueState, Stored, parse, store
from orchestra.hosting.session_queue import SessionQueues
from orchestra.storage import InMemoryStorage, LocalFileStorage

KEY = "busy/chat/s1.json"


class Counting(LocalFileStorage):
    """Local files that count whole writes and appends of busy documents."""

    def __init__(self, root) -> None:
        super().__init__(root, durable=False)
        self.written = self.appended = 0

    async def write(self, key, data, *, expect=None):
        self.written += key.startswith("busy/")
        return await super().write(key, data, expect=expect)

    async def append(self, key, data, *, at, tail=b""):
        self.appended += key.startswith("busy/")
        return await super().append(key, data, at=at, tail=tail)


async def two_servers(storage):
    servers = [Liveness(storage, every_s=0.05, gone_after_s=30) for _ in range(2)]
    for liveness in servers:
        await liveness.start()
    return servers, [SessionQueues(storage, liveness, max_queue=5) for liveness in servers]


async def test_a_turn_on_local_files_appends_its_claim_and_release(tmp_path):
    storage = Counting(tmp_path)
    servers, (one, _) = await two_servers(storage)
    try:
        for turn in range(3):
            waiter = await one.enter("chat", "s1", f"r{turn}")
            assert waiter.handed.is_set()
            await one.release("chat", "s1", f"r{turn}")
    finally:
        for liveness in servers:
            await liveness.stop()
    assert (storage.written, storage.appended) == (0, 6)  # no new file after the first append made it
    data = (tmp_path / KEY).read_bytes()
    assert data.count(b"\n") == 6
    state, _ = parse(data, "v")
    assert state == QueueState(None, [], servers[0].server_id)


async def test_a_stale_server_is_refused_and_queues_behind_the_other_servers_run(tmp_path):
    # Server two saw the document idle; server one claimed the session since by an append. Two's append
    # on what it saw is refused (the document is longer), so it reads again and queues behind r1.
    storage = LocalFileStorage(tmp_path, durable=False)
    servers, (one, two) = await two_servers(storage)
    try:
        await two.release("chat", "s1", "nothing")  # nothing to release: it only reads the document
        await two.enter("chat", "s1", "r0")
        await two.release("chat", "s1", "r0")  # two's cache: idle, at its own last append
        assert (await one.enter("chat", "s1", "r1")).handed.is_set()
        second = await two.enter("chat", "s1", "r2")
        assert not second.handed.is_set()
        state, _ = await one.read("chat", "s1")
        assert state.active == Holder("r1", servers[0].server_id)
        assert state.queue == [Holder("r2", servers[1].server_id)]
    finally:
        for liveness in servers:
            await liveness.stop()


async def test_past_its_bound_a_document_is_written_whole_and_a_stale_append_is_refused(tmp_path):
    storage = Counting(tmp_path)
    stored = Stored()
    states: list[QueueState] = []
    seen_before_rewrite = None
    while storage.written < 2:  # until it was started again at one line twice
        states.append(QueueState(Holder(f"run-{len(states):04}", "server-a"), [], "server-a"))
        before = stored
        stored = await store(storage, KEY, stored, states[-1])
        if stored.length < before.length and seen_before_rewrite is None:
            seen_before_rewrite = before
    assert COMPACT_AT // 200 < storage.appended < len(states)
    assert (tmp_path / KEY).stat().st_size <= COMPACT_AT
    assert parse((tmp_path / KEY).read_bytes(), "v")[0] == states[-1]
    # A server that saw the document before a rewrite cannot append to it, nor write over it.
    from orchestra.errors import StorageConflictError

    with pytest.raises(StorageConflictError):
        await store(storage, KEY, seen_before_rewrite, QueueState())
    assert parse((tmp_path / KEY).read_bytes(), "v")[0] == states[-1]


@pytest.mark.parametrize("end", [b"\x00" * 40, b'{"active": {"run_id": "r9", "ser', b"\n\x00\x00\n"])
async def test_a_document_whose_end_a_power_cut_tore_reads_as_its_last_whole_line(tmp_path, end):
    storage = Counting(tmp_path)
    kept = QueueState(Holder("r1", "server-a"), [Holder("r2", "server-b")], "server-a")
    (tmp_path / "busy" / "chat").mkdir(parents=True)
    (tmp_path / KEY).write_bytes(QueueState().to_json() + b"\n" + kept.to_json() + b"\n" + end)
    state, stored = parse((tmp_path / KEY).read_bytes(), "v")
    assert state == kept
    found = await storage.read(KEY)
    assert found is not None
    state, stored = parse(*found)
    stored = await store(storage, KEY, stored, QueueState(None, [Holder("r2", "server-b")], "server-a"))
    assert (storage.written, storage.appended) == (1, 0)  # written whole: no append after a torn end
    assert (tmp_path / KEY).read_bytes().count(b"\n") == 1
    await store(storage, KEY, stored, QueueState())
    assert storage.appended == 1  # then appended again


def test_nothing_that_reads_is_an_idle_session():
    state, stored = parse(b"\x00\x00\x00", "v")
    assert state == QueueState()
    assert (stored.length, stored.last_line) == (3, b"")


async def test_on_a_storage_without_appends_every_change_is_written_whole():
    storage = InMemoryStorage()
    stored = Stored()
    for index in range(3):
        stored = await store(storage, KEY, stored, QueueState(Holder(f"r{index}", "a"), [], "a"))
    found = await storage.read(KEY)
    assert found is not None
    assert found[0].count(b"\n") == 1
    assert parse(*found)[0].active == Holder("r2", "a")
