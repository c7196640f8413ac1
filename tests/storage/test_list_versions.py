"""``list_versions``: every key under a prefix with its version, without the values, on the storages that
can (databases, memory, and the wrappers over them); None on those that cannot (files hash a value to
version it, S3 would need a request per key)."""

from __future__ import annotations

from orchestra.storage import list_versions, read_many


async def test_list_versions_matches_reads(storage) -> None:
    keys = ["a/1", "a/2", "a/sub/3", "b/1"]
    for key in keys:
        await storage.write(key, key.encode())
    await storage.write("a/2", b"changed")
    found = await list_versions(storage, "a/")
    inner = getattr(storage, "inner", storage)
    if found is None:
        assert type(inner).__name__ in ("LocalFileStorage", "S3Storage", "PrefixedStorage")
        return
    wanted = ["a/1", "a/2", "a/sub/3"]
    reads = await read_many(storage, wanted)
    assert found == [(key, read[1]) for key, read in zip(wanted, reads, strict=True) if read is not None]
    await storage.delete("a/1")
    assert [key for key, _ in await list_versions(storage, "a/")] == ["a/2", "a/sub/3"]  # type: ignore[union-attr]
