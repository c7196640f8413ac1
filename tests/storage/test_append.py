"""The conformance suite of ``AppendStorage``, which every storage offering appends runs: local files, a
prefixed view of them, and the test wrappers that pass appends on. Plus what only local files can show:
processes racing, a full disk, symlinks."""

from __future__ import annotations

import multiprocessing
import os

import anyio
import pytest

from orchestra.errors import StorageConflictError, StorageFullError, StorageSecurityError
from orchestra.storage import (
    AppendStorage,
    EncryptedStorage,
    EnvKeyProvider,
    InMemoryStorage,
    LocalFileStorage,
    PrefixedStorage,
    appendable,
)
from orchestra.testing import CountingStorage, FaultyStorage


@pytest.fixture(params=["local", "prefixed", "counting", "faulty"])
def appender(request, tmp_path) -> AppendStorage:
    local = LocalFileStorage(tmp_path / "store")
    storage = {
        "local": local,
        "prefixed": PrefixedStorage(local, "tenant/acme"),
        "counting": CountingStorage(local),
        "faulty": FaultyStorage(local, appends=True),
    }[request.param]
    found = appendable(storage)
    assert found is storage
    return found


async def test_is_an_append_storage(appender):
    assert isinstance(appender, AppendStorage)


def test_storages_without_appends_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", "k1=" + "A" * 43 + "=")
    local = LocalFileStorage(tmp_path)
    assert appendable(InMemoryStorage()) is None
    assert appendable(FaultyStorage(local)) is None  # passes appends on only when asked to
    assert appendable(CountingStorage(InMemoryStorage())) is None
    assert appendable(PrefixedStorage(InMemoryStorage(), "p")) is None
    assert appendable(EncryptedStorage(local, EnvKeyProvider())) is None  # never plaintext appends


async def test_the_first_append_creates_the_value(appender):
    assert await appender.append("j/seg", b"one\n", at=0) == 4
    assert (await appender.read("j/seg"))[0] == b"one\n"
    assert await appender.append("j/seg", b"two\n", at=4, tail=b"ne\n") == 8
    assert (await appender.read("j/seg"))[0] == b"one\ntwo\n"


async def test_read_from_an_offset(appender):
    await appender.append("j/seg", b"abcdef", at=0)
    assert await appender.read_from("j/seg", 0) == b"abcdef"
    assert await appender.read_from("j/seg", 4) == b"ef"
    assert await appender.read_from("j/seg", 6) == b""
    assert await appender.read_from("j/seg", 60) == b""
    assert await appender.read_from("j/missing", 0) is None


async def test_an_append_changes_the_version(appender):
    await appender.append("j/seg", b"one\n", at=0)
    before = (await appender.read("j/seg"))[1]
    await appender.append("j/seg", b"two\n", at=4)
    assert (await appender.read("j/seg"))[1] != before


async def test_creating_what_exists_is_a_conflict(appender):
    await appender.append("j/seg", b"first\n", at=0)
    with pytest.raises(StorageConflictError, match="j/seg"):
        await appender.append("j/seg", b"second\n", at=0)
    assert (await appender.read("j/seg"))[0] == b"first\n"


async def test_an_empty_value_counts_as_absent(appender):
    """A creator killed before it wrote anything leaves an empty file; the next creator takes it."""
    await appender.write("j/seg", b"")
    await appender.append("j/seg", b"first\n", at=0)
    assert (await appender.read("j/seg"))[0] == b"first\n"


async def test_an_append_at_the_wrong_length_is_a_conflict(appender):
    await appender.append("j/seg", b"one\n", at=0)
    await appender.append("j/seg", b"two\n", at=4)
    for at in (4, 3, 9):  # behind (another writer appended), or ahead
        with pytest.raises(StorageConflictError, match="j/seg"):
            await appender.append("j/seg", b"three\n", at=at)
    assert (await appender.read("j/seg"))[0] == b"one\ntwo\n"


async def test_a_value_rewritten_to_the_same_length_refuses_an_append_that_expects_its_old_end(appender):
    await appender.append("j/seg", b"one\ntwo\n", at=0)
    version = (await appender.read("j/seg"))[1]
    await appender.write("j/seg", b"one\nTWO\n", expect=version)  # a redaction, a delete's tombstones
    with pytest.raises(StorageConflictError, match="rewritten"):
        await appender.append("j/seg", b"three\n", at=8, tail=b"two\n")
    assert (await appender.read("j/seg"))[0] == b"one\nTWO\n"
    await appender.append("j/seg", b"three\n", at=8, tail=b"TWO\n")


async def test_appending_to_a_missing_or_deleted_value_is_a_conflict(appender):
    with pytest.raises(StorageConflictError, match="does not exist"):
        await appender.append("j/seg", b"x\n", at=3)
    await appender.append("j/seg", b"abc", at=0)
    await appender.delete("j/seg")
    with pytest.raises(StorageConflictError, match="does not exist"):
        await appender.append("j/seg", b"x\n", at=3, tail=b"c")
    assert await appender.read("j/seg") is None


async def test_a_malformed_condition_or_key_is_refused_before_anything_happens(appender):
    with pytest.raises(ValueError, match="not a condition"):
        await appender.append("j/seg", b"x", at=1, tail=b"ab")
    with pytest.raises(ValueError, match="not a condition"):
        await appender.append("j/seg", b"x", at=-1)
    with pytest.raises(StorageSecurityError):
        await appender.append("../escape", b"x", at=0)
    with pytest.raises(StorageSecurityError):
        await appender.read_from("a/../../b", 0)


async def test_racing_appenders_at_one_length_exactly_one_wins(appender):
    await appender.append("j/seg", b"head\n", at=0)
    won: list[int] = []

    async def one(i: int) -> None:
        try:
            await appender.append("j/seg", b"writer %d\n" % i, at=5, tail=b"head\n")
            won.append(i)
        except StorageConflictError:
            pass

    async with anyio.create_task_group() as group:
        for i in range(8):
            group.start_soon(one, i)
    assert len(won) == 1
    assert (await appender.read("j/seg"))[0] == b"head\nwriter %d\n" % won[0]


async def test_racing_creators_exactly_one_wins(appender):
    won: list[int] = []

    async def one(i: int) -> None:
        try:
            await appender.append("j/new", b"creator %d\n" % i, at=0)
            won.append(i)
        except StorageConflictError:
            pass

    async with anyio.create_task_group() as group:
        for i in range(8):
            group.start_soon(one, i)
    assert len(won) == 1
    assert (await appender.read("j/new"))[0] == b"creator %d\n" % won[0]


# -- local files only ----------------------------------------------------------------------------------


def _race(root: str, index: int, start: multiprocessing.synchronize.Event, results) -> None:  # type: ignore[name-defined]
    storage = LocalFileStorage(root)
    start.wait()
    try:
        anyio.run(lambda: storage.append("j/seg", b"process %d\n" % index, at=5, tail=b"head\n"))
        results.put(index)
    except StorageConflictError:
        results.put(-1)


def test_processes_racing_to_append_exactly_one_wins(tmp_path):
    anyio.run(lambda: LocalFileStorage(tmp_path).append("j/seg", b"head\n", at=0))
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    processes = [context.Process(target=_race, args=(str(tmp_path), i, start, results)) for i in range(6)]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(30)
    outcomes = [results.get(timeout=5) for _ in processes]
    winners = [i for i in outcomes if i >= 0]
    assert len(winners) == 1
    assert (tmp_path / "j/seg").read_bytes() == b"head\nprocess %d\n" % winners[0]


async def test_an_append_never_follows_a_symlink(tmp_path):
    storage = LocalFileStorage(tmp_path / "store")
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep\n")
    (tmp_path / "store/j").mkdir(parents=True)
    os.symlink(outside, tmp_path / "store/j/seg")
    with pytest.raises(StorageSecurityError):
        await storage.append("j/seg", b"x\n", at=5)
    with pytest.raises(StorageSecurityError):
        await storage.read_from("j/seg", 0)
    assert outside.read_bytes() == b"keep\n"


async def test_new_files_are_private(tmp_path):
    storage = LocalFileStorage(tmp_path)
    await storage.append("a/j/seg", b"x\n", at=0)
    assert (tmp_path / "a/j/seg").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "a/j").stat().st_mode & 0o777 == 0o700


async def test_an_append_the_disk_cannot_hold_leaves_the_value_as_it_was(small_disk):
    storage = LocalFileStorage(small_disk("64k"))
    await storage.append("j/seg", b"head\n", at=0)
    with pytest.raises(StorageFullError) as full:
        await storage.append("j/seg", b"x" * 200_000, at=5, tail=b"head\n")
    assert full.value.stored is False
    assert (await storage.read("j/seg"))[0] == b"head\n"  # the part that fit was cut off again
    await storage.append("j/seg", b"next\n", at=5, tail=b"head\n")
