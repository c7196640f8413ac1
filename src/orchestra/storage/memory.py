"""``InMemoryStorage``: a dict and a version counter, for tests and short-lived runs."""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Sequence

from orchestra.errors import StorageConflictError
from orchestra.storage._base import ABSENT, Expect, validate_key, validate_prefix

__all__ = ["InMemoryStorage"]


class InMemoryStorage:
    """Storage in this process's memory; thread-safe, gone when the process ends."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[bytes, str]] = {}
        self._keys: list[str] = []  # kept sorted for list()
        self._lock = threading.Lock()
        self._counter = itertools.count(1)

    async def read(self, key: str) -> tuple[bytes, str] | None:
        validate_key(key)
        with self._lock:
            return self._data.get(key)

    async def read_many(self, keys: Sequence[str]) -> list[tuple[bytes, str] | None]:
        """Several reads under one hold of the lock (a task per key would cost more than the reads)."""
        for key in keys:
            validate_key(key)
        with self._lock:
            return [self._data.get(key) for key in keys]

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        validate_key(key)
        with self._lock:
            current = self._data.get(key)
            if expect is ABSENT and current is not None:
                raise StorageConflictError(f"cannot create {key!r}: it already exists")
            if isinstance(expect, str) and (current is None or current[1] != expect):
                found = "it does not exist" if current is None else f"it is at version {current[1]}"
                raise StorageConflictError(f"cannot update {key!r}: expected version {expect}, but {found}")
            version = str(next(self._counter))
            if current is None:
                bisect.insort(self._keys, key)
            self._data[key] = (bytes(data), version)
            return version

    async def delete(self, key: str) -> None:
        validate_key(key)
        with self._lock:
            if self._data.pop(key, None) is not None:
                del self._keys[bisect.bisect_left(self._keys, key)]

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        validate_prefix(prefix)
        with self._lock:
            start = bisect.bisect_left(self._keys, prefix)
            if start_after is not None:
                start = max(start, bisect.bisect_right(self._keys, start_after))
            out: list[str] = []
            for key in itertools.islice(self._keys, start, None):
                if not key.startswith(prefix) or (limit is not None and len(out) >= limit):
                    break
                out.append(key)
            return out

    async def list_versions(self, prefix: str) -> Sequence[tuple[str, str]]:
        """``(key, version)`` of every key under ``prefix``, sorted (see ``orchestra.storage.list_versions``)."""
        keys = await self.list(prefix)
        with self._lock:
            return [(key, found[1]) for key in keys if (found := self._data.get(key)) is not None]

    async def delete_prefix(self, prefix: str) -> int:
        keys = await self.list(prefix)
        for key in keys:
            await self.delete(key)
        return len(keys)
