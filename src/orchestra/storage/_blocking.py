"""``BlockingStorage``: the async ``Storage`` protocol over a backend whose calls block (files, boto3).

Subclasses implement the five blocking operations; this base validates keys on the event loop, where a
bad key fails fast, and runs the blocking work in a worker thread so the loop never waits on I/O.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import anyio.to_thread

from orchestra._concurrency import map_concurrently
from orchestra.storage._base import Expect, validate_key, validate_prefix

__all__ = ["BlockingStorage"]


class BlockingStorage(abc.ABC):
    """Implements ``Storage`` by running ``_read``, ``_write``, ... in worker threads."""

    batch_io = False  # see read_many and write_many

    @abc.abstractmethod
    def _read(self, key: str) -> tuple[bytes, str] | None: ...

    @abc.abstractmethod
    def _write(self, key: str, data: bytes, expect: Expect) -> str: ...

    @abc.abstractmethod
    def _delete(self, key: str) -> None: ...

    @abc.abstractmethod
    def _list(self, prefix: str, start_after: str | None, limit: int | None) -> list[str]: ...

    @abc.abstractmethod
    def _delete_prefix(self, prefix: str) -> int: ...

    async def read(self, key: str) -> tuple[bytes, str] | None:
        validate_key(key)
        return await anyio.to_thread.run_sync(self._read, key)

    async def read_many(self, keys: Sequence[str]) -> list[tuple[bytes, str] | None]:
        """Several reads: in one worker thread when ``batch_io`` (a backend whose calls are quick, where the
        hop to a thread costs more than the call), else concurrently."""
        for key in keys:
            validate_key(key)
        if self.batch_io:
            return await anyio.to_thread.run_sync(lambda: [self._read(key) for key in keys])
        return await map_concurrently(self.read, keys)

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        validate_key(key)
        return await anyio.to_thread.run_sync(self._write, key, bytes(data), expect)

    async def write_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Several unconditional writes, batched like ``read_many``."""
        for key, _ in items:
            validate_key(key)
        if self.batch_io:
            await anyio.to_thread.run_sync(
                lambda: [self._write(key, bytes(data), None) for key, data in items]
            )
        else:
            await map_concurrently(lambda item: self.write(*item), items)

    async def delete(self, key: str) -> None:
        validate_key(key)
        await anyio.to_thread.run_sync(self._delete, key)

    def _delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._delete(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Several deletes, batched like ``read_many`` (``_delete_many`` may share work between keys)."""
        for key in keys:
            validate_key(key)
        if self.batch_io:
            await anyio.to_thread.run_sync(self._delete_many, list(keys))
        else:
            await map_concurrently(self.delete, keys)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        validate_prefix(prefix)
        return await anyio.to_thread.run_sync(self._list, prefix, start_after, limit)

    async def delete_prefix(self, prefix: str) -> int:
        validate_prefix(prefix)
        return await anyio.to_thread.run_sync(self._delete_prefix, prefix)
