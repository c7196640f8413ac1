"""The conformance suite every Storage backend runs (memory, local files, S3 through moto's server)."""

import sys

import anyio
import anyio.lowlevel
import pytest

from orchestra.errors import StorageConflictError, StorageSecurityError
from orchestra.storage import ABSENT, Storage
from orchestra.storage._base import delete_many, read_many, write_many


async def test_is_a_storage(storage):
    assert isinstance(storage, Storage)


async def test_read_missing_is_none(storage):
    assert await storage.read("a/b.json") is None


async def test_write_read_round_trip_binary(storage):
    data = bytes(range(256)) * 10
    version = await storage.write("dir/sub/blob.bin", data)
    assert await storage.read("dir/sub/blob.bin") == (data, version)


async def test_version_changes_with_content(storage):
    v1 = await storage.write("k", b"one")
    v2 = await storage.write("k", b"two")
    assert v1 != v2
    assert (await storage.read("k"))[1] == v2


async def test_create_only(storage):
    await storage.write("k", b"first", expect=ABSENT)
    with pytest.raises(StorageConflictError, match="k'.*already exists"):
        await storage.write("k", b"second", expect=ABSENT)
    assert (await storage.read("k"))[0] == b"first"


async def test_compare_and_swap(storage):
    v1 = await storage.write("k", b"one")
    v2 = await storage.write("k", b"two", expect=v1)
    with pytest.raises(StorageConflictError, match="k'"):
        await storage.write("k", b"three", expect=v1)
    assert await storage.read("k") == (b"two", v2)


async def test_compare_and_swap_on_a_missing_key_conflicts(storage):
    version = await storage.write("other", b"x")
    with pytest.raises(StorageConflictError):
        await storage.write("missing", b"x", expect=version)
    assert await storage.read("missing") is None


async def test_delete(storage):
    await storage.write("a/k", b"x")
    await storage.delete("a/k")
    assert await storage.read("a/k") is None
    await storage.delete("a/k")  # deleting again is fine
    await storage.delete("never/was")


async def test_list_is_sorted_and_filtered(storage):
    keys = ["s/1/b", "s/1/a", "s/10/a", "s/2/a", "t/x", "s/1/c/d"]
    for key in keys:
        await storage.write(key, b"v")
    assert await storage.list("s/1/") == ["s/1/a", "s/1/b", "s/1/c/d"]
    assert await storage.list("s/1") == ["s/1/a", "s/1/b", "s/1/c/d", "s/10/a"]
    assert await storage.list("") == sorted(keys)
    assert await storage.list("s/", start_after="s/1/b") == ["s/1/c/d", "s/10/a", "s/2/a"]
    assert await storage.list("s/", limit=2) == ["s/1/a", "s/1/b"]
    assert await storage.list("s/", start_after="s/1/a", limit=1) == ["s/1/b"]
    assert await storage.list("nothing/") == []


async def test_list_many_keys_paginates(storage):
    async with anyio.create_task_group() as group:
        for i in range(1100 if type(storage).__name__ == "S3Storage" else 300):
            group.start_soon(storage.write, f"many/{i:05d}", b"x")
    keys = await storage.list("many/")
    assert keys == sorted(keys)
    assert len(keys) == (1100 if type(storage).__name__ == "S3Storage" else 300)


async def test_delete_prefix(storage):
    for key in ["p/a", "p/b/c", "p2/a", "q/a"]:
        await storage.write(key, b"v")
    assert await storage.delete_prefix("p/") == 2
    assert await storage.list("") == ["p2/a", "q/a"]
    assert await storage.delete_prefix("p/") == 0


@pytest.mark.parametrize(
    "key", ["", "/abs", "a/../b", "..", "a\\b", "a\x00b", "a//b", "./a", "a/.hidden", "a/"]
)
async def test_bad_keys_are_refused(storage, key):
    with pytest.raises(StorageSecurityError, match="invalid storage key"):
        await storage.write(key, b"x")
    with pytest.raises(StorageSecurityError):
        await storage.read(key)


async def test_read_many_and_write_many_match_one_by_one(storage):
    """The batched calls (one worker thread for local files, concurrent elsewhere) are the plain calls."""
    items = [(f"batch/{i:03d}.json", f"value {i}".encode()) for i in range(40)]
    await write_many(storage, items)
    keys = [key for key, _ in items]
    found = await read_many(storage, [*keys, "batch/missing.json"])
    assert found == [*[await storage.read(key) for key in keys], None]
    assert [data for data, _ in found[:-1]] == [data for _, data in items]
    with pytest.raises(StorageSecurityError):
        await read_many(storage, ["batch/ok.json", "../escape"])
    with pytest.raises(StorageSecurityError):
        await write_many(storage, [("batch/ok.json", b"x"), ("a/.hidden", b"x")])
    assert await storage.read("batch/ok.json") is None  # a refused batch writes nothing


async def test_delete_many_deletes_exactly_the_keys_given(storage):
    """Keys from several folders, one missing, one repeated: those given go, the rest stay."""
    keys = [f"many/{folder}/{i}.json" for folder in ("a", "b", "a/deeper") for i in range(5)]
    for key in [*keys, "many/a/kept.json", "many/b/kept.json"]:
        await storage.write(key, b"x")
    await delete_many(storage, [*keys, keys[0], "many/a/missing.json", "many/nowhere/x.json"])
    assert await storage.list("many/") == ["many/a/kept.json", "many/b/kept.json"]
    with pytest.raises(StorageSecurityError):
        await delete_many(storage, ["many/a/kept.json", "../escape"])
    assert await storage.read("many/a/kept.json") is not None  # a refused batch deletes nothing


async def test_concurrent_creates_exactly_one_wins(storage):
    """What one writer per session rests on. Per key, 8 writers race to create it and exactly one wins.
    A tiny switch interval makes threads interleave often: it showed moto's server letting two racing
    ``If-None-Match: *`` PUTs both win (see ``OneRequestAtATime`` in conftest.py)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for key in range(60):
            outcomes: list[int] = []

            async def create(i: int, key: int = key, outcomes: list[int] = outcomes) -> None:
                try:
                    await storage.write(f"race/{key}", f"writer {i}".encode(), expect=ABSENT)
                    outcomes.append(i)
                except StorageConflictError:
                    pass

            async with anyio.create_task_group() as group:
                for i in range(8):
                    group.start_soon(create, i)
            assert len(outcomes) == 1, f"key {key}: writers {outcomes} all created it"
            assert (await storage.read(f"race/{key}"))[0] == f"writer {outcomes[0]}".encode()
    finally:
        sys.setswitchinterval(interval)


async def test_concurrent_compare_and_swap_loses_no_update(storage):
    await storage.write("counter", b"0")
    increments = 0

    async def bump():
        nonlocal increments
        for _ in range(5):
            while True:
                data, version = await storage.read("counter")
                try:
                    await storage.write("counter", str(int(data) + 1).encode(), expect=version)
                    increments += 1
                    break
                except StorageConflictError:
                    await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(bump)
    assert increments == 20
    assert (await storage.read("counter"))[0] == b"20"
