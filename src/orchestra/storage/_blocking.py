"""``BlockingStorage``: the async ``Storage`` protocol over a backend whose calls block (files, boto3).

Subclasses implement the five blocking operations; this base validates keys on the event loop, where a
bad key fails fast, and runs the blocking work in a worker thread so the loop never waits on I/O. An
``OSError`` from the blocking work comes out as the ``StorageError`` it stands for (``os_error``), naming
the operation, the key and the OS's reason.
"""

from __future__ import annotations

import abc
import errno
from collections.abc import Callable, Sequence
from typing import TypeVar

import anyio.to_thread

from orchestra._concurrency import map_concurrently
from orchestra.errors import StorageConfigurationError, StorageError, StorageFullError
from orchestra.storage._base import Expect, validate_key, validate_prefix

__all__ = ["BlockingStorage", "os_error"]

T = TypeVar("T")

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_MISCONFIGURED = {errno.EACCES, errno.EPERM, errno.EROFS}


def os_error(where: str, operation: str, key: str, exc: OSError) -> StorageError:
    """The ``StorageError`` an ``OSError`` stands for, raised before the operation took effect: a full disk
    is ``StorageFullError``, a permission or a read-only file system ``StorageConfigurationError``."""
    reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno is not None else str(exc)
    subject = f"{where}: {operation} of {key!r} failed: {reason}"
    if exc.errno in _FULL:
        return StorageFullError(
            f"{subject}; nothing was written: free space, then try again",
            operation=operation,
            key=key,
            reason=reason,
        )
    if exc.errno in _MISCONFIGURED:
        return StorageConfigurationError(
            f"{subject}; check the storage's permissions (retrying will not help)",
            operation=operation,
            key=key,
            reason=reason,
        )
    done = "nothing was changed" if operation != "read" and operation != "list" else "nothing was read"
    return StorageError(f"{subject}; {done}", operation=operation, key=key, reason=reason)


class BlockingStorage(abc.ABC):
    """Implements ``Storage`` by running ``_read``, ``_write``, ... in worker threads."""

    batch_io = False  # see read_many and write_many

    def _guarded(self, operation: str, key: str, call: Callable[..., T], *args: object) -> T:
        """``call(*args)`` (in the worker thread), an ``OSError`` turned into the ``StorageError`` it means."""
        try:
            return call(*args)
        except StorageError:
            raise
        except OSError as exc:
            raise os_error(repr(self), operation, key, exc) from exc

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
        return await anyio.to_thread.run_sync(self._guarded, "read", key, self._read, key)

    async def read_many(self, keys: Sequence[str]) -> list[tuple[bytes, str] | None]:
        """Several reads: in one worker thread when ``batch_io`` (a backend whose calls are quick, where the
        hop to a thread costs more than the call), else concurrently."""
        for key in keys:
            validate_key(key)
        if self.batch_io:
            return await anyio.to_thread.run_sync(
                lambda: [self._guarded("read", key, self._read, key) for key in keys]
            )
        return await map_concurrently(self.read, keys)

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        validate_key(key)
        return await anyio.to_thread.run_sync(
            self._guarded, "write", key, self._write, key, bytes(data), expect
        )

    async def write_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Several unconditional writes, batched like ``read_many``."""
        for key, _ in items:
            validate_key(key)
        if self.batch_io:
            await anyio.to_thread.run_sync(
                lambda: [
                    self._guarded("write", key, self._write, key, bytes(data), None) for key, data in items
                ]
            )
        else:
            await map_concurrently(lambda item: self.write(*item), items)

    async def delete(self, key: str) -> None:
        validate_key(key)
        await anyio.to_thread.run_sync(self._guarded, "delete", key, self._delete, key)

    def _delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._delete(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Several deletes, batched like ``read_many`` (``_delete_many`` may share work between keys)."""
        for key in keys:
            validate_key(key)
        if self.batch_io:
            first = keys[0] if keys else ""
            what = first if len(keys) <= 1 else f"{first} (and {len(keys) - 1} more)"
            await anyio.to_thread.run_sync(self._guarded, "delete", what, self._delete_many, list(keys))
        else:
            await map_concurrently(self.delete, keys)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        validate_prefix(prefix)
        return await anyio.to_thread.run_sync(
            self._guarded, "list", prefix, self._list, prefix, start_after, limit
        )

    async def delete_prefix(self, prefix: str) -> int:
        validate_prefix(prefix)
        return await anyio.to_thread.run_sync(
            self._guarded, "delete_prefix", prefix, self._delete_prefix, prefix
        )
