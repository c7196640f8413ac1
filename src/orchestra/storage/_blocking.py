"""``BlockingStorage``: the async ``Storage`` protocol over a backend whose calls block (files, boto3).

Subclasses implement the five blocking operations; this base validates keys on the event loop, where a
bad key fails fast, and runs the blocking work in a worker thread so the loop never waits on I/O.
"""

from __future__ import annotations

import abc

import anyio.to_thread

from orchestra.storage._base import Expect, validate_key, validate_prefix

__all__ = ["BlockingStorage"]


class BlockingStorage(abc.ABC):
    """Implements ``Storage`` by running ``_read``, ``_write``, ... in worker threads."""

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

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        validate_key(key)
        return await anyio.to_thread.run_sync(self._write, key, bytes(data), expect)

    async def delete(self, key: str) -> None:
        validate_key(key)
        await anyio.to_thread.run_sync(self._delete, key)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        validate_prefix(prefix)
        return await anyio.to_thread.run_sync(self._list, prefix, start_after, limit)

    async def delete_prefix(self, prefix: str) -> int:
        validate_prefix(prefix)
        return await anyio.to_thread.run_sync(self._delete_prefix, prefix)
