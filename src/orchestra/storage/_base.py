"""The ``Storage`` protocol: opaque bytes under string keys, with conditional writes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, Protocol, TypeAlias, final, runtime_checkable

from orchestra.errors import StorageSecurityError

__all__ = [
    "ABSENT",
    "Absent",
    "Expect",
    "ForwardingStorage",
    "Storage",
    "delete_many",
    "list_versions",
    "read_many",
    "scrub",
    "validate_key",
    "write_many",
]


@final
class Absent:
    """The type of ``ABSENT``: a write condition meaning "only if the key does not exist yet"."""

    _instance: Absent | None = None

    def __new__(cls) -> Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = Absent()

Expect: TypeAlias = Absent | str | None
"""A write condition: None (always write), ``ABSENT`` (create only) or a version (compare-and-swap)."""


@runtime_checkable
class Storage(Protocol):
    """Bytes-level key-value storage that sessions persist through.

    Keys are ``/``-separated paths such as ``session/s1/scopes/agent/a1/snapshots/snapshot_latest.json``.
    A version is an opaque string that changes whenever the value changes. Every implementation runs the
    same conformance suite (``tests/storage/test_conformance.py``), concurrent writers included.
    """

    async def read(self, key: str) -> tuple[bytes, str] | None:
        """The value and its version, or None if the key does not exist."""
        ...

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        """Store ``data`` under ``key`` and return the new version.

        Args:
            expect: None writes unconditionally; ``ABSENT`` writes only if the key does not exist; a version
                writes only if the key currently has that version.

        Raises:
            StorageConflictError: the condition did not hold; nothing was written.
        """
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key``; removing a key that does not exist is not an error."""
        ...

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        """The keys that start with ``prefix``, sorted, after ``start_after``, at most ``limit`` of them."""
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """Remove every key that starts with ``prefix``; returns how many were removed."""
        ...


class ForwardingStorage:
    """A storage that hands every call to ``inner``: subclass it and override what a wrapper changes."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    async def read(self, key: str) -> tuple[bytes, str] | None:
        return await self.inner.read(key)

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        return await self.inner.write(key, data, expect=expect)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        return await self.inner.list(prefix, start_after=start_after, limit=limit)

    async def delete_prefix(self, prefix: str) -> int:
        return await self.inner.delete_prefix(prefix)


async def read_many(storage: Storage, keys: Sequence[str]) -> list[tuple[bytes, str] | None]:
    """``[await storage.read(key) for key in keys]``, read at once.

    A storage may offer ``read_many`` itself (local files read a batch in one worker thread: a thread hop
    per small file costs more than the read); otherwise the reads run concurrently.
    """
    batch = getattr(storage, "read_many", None)
    if batch is not None:
        return list(await batch(keys))
    from orchestra._concurrency import map_concurrently

    return await map_concurrently(storage.read, keys)


async def write_many(storage: Storage, items: Sequence[tuple[str, bytes]]) -> None:
    """Write each ``(key, data)`` unconditionally, at once (in one worker thread where the storage offers
    ``write_many``, as local files do; otherwise concurrently)."""
    batch = getattr(storage, "write_many", None)
    if batch is not None:
        await batch(items)
        return
    from orchestra._concurrency import map_concurrently

    for key, _ in items:  # a bad key refuses the whole batch before anything is written
        validate_key(key)
    await map_concurrently(lambda item: storage.write(*item), items)


async def delete_many(storage: Storage, keys: Sequence[str]) -> None:
    """Delete each key, at once (local files: in one worker thread, with one lock and one sync per folder
    instead of one per key; otherwise concurrently)."""
    batch = getattr(storage, "delete_many", None)
    if batch is not None:
        await batch(keys)
        return
    from orchestra._concurrency import map_concurrently

    for key in keys:  # a bad key refuses the whole batch before anything is deleted
        validate_key(key)
    await map_concurrently(storage.delete, keys)


async def list_versions(storage: Storage, prefix: str) -> list[tuple[str, str]] | None:
    """``(key, version)`` of every key that starts with ``prefix``, sorted, without reading the values,
    where the storage can (``list_versions`` on databases and in memory, and wrappers that pass it on);
    None where it cannot (local files version a value by hashing it, so they must read it)."""
    method = getattr(storage, "list_versions", None)
    if method is None:
        return None
    found = await method(prefix)
    return None if found is None else list(found)


async def scrub(storage: Storage) -> None:
    """Have ``storage`` drop what it still keeps of data deleted from it, where it keeps any: SQLite's
    write-ahead log is checkpointed and truncated (its deleted rows are already zeroed, ``secure_delete``);
    PostgreSQL's table is rewritten (``VACUUM FULL``, which locks it while it runs).
    Wrappers (``EncryptedStorage``, ``PrefixedStorage``, ...) pass it to the storage they wrap; a storage
    without a ``scrub`` method keeps nothing to drop (files are unlinked, S3 objects deleted)."""
    seen: object = storage
    while seen is not None:
        method = getattr(seen, "scrub", None)
        if method is not None:
            await method()
            return
        seen = getattr(seen, "inner", None)


_FORBIDDEN = re.compile(r"[\x00\\]")


def validate_key(key: str) -> str:
    """Refuse keys that could escape a storage root or collide with a backend's private files.

    A key is non-empty, has no leading ``/``, no backslash or NUL, and no empty, ``.``, ``..`` or
    dot-prefixed segment (names starting with ``.`` are reserved for temp and lock files).

    Raises:
        StorageSecurityError: the key is not acceptable; the message names it and says why.
    """
    if not isinstance(key, str) or not key:
        raise StorageSecurityError(f"invalid storage key {key!r}: keys are non-empty strings")
    if key.startswith("/"):
        raise StorageSecurityError(f"invalid storage key {key!r}: keys must not start with '/'")
    if _FORBIDDEN.search(key):
        raise StorageSecurityError(f"invalid storage key {key!r}: keys must not contain a backslash or NUL")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise StorageSecurityError(f"invalid storage key {key!r}: empty, '.' or '..' path segment")
        if segment.startswith("."):
            raise StorageSecurityError(
                f"invalid storage key {key!r}: segments starting with '.' are reserved for the backend"
            )
    return key


def validate_prefix(prefix: str) -> str:
    """Like :func:`validate_key`, but an empty prefix and a trailing ``/`` are allowed."""
    if prefix == "":
        return prefix
    validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix
