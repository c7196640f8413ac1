"""``SQLStorage``: the ``Storage`` protocol over one key-value table, shared by SQLite and PostgreSQL.

The table is ``orchestra_storage(key, data, version)``: the key is the primary key, compared byte by byte
(so ``list`` returns keys in the order Python sorts them), ``data`` the value, ``version`` a token made
for each write (``new_version``), so reading back tells our write from any other.

Every change goes through ``GroupCommit``: a database storage is a ``Committer`` that applies a batch in
one transaction, with the condition of each write done by the database itself::

    expect=None      INSERT ... ON CONFLICT (key) DO UPDATE SET data = ..., version = ...
    expect=ABSENT    INSERT ... ON CONFLICT (key) DO NOTHING        (no row inserted: a conflict)
    expect=version   UPDATE ... WHERE key = ... AND version = ...    (no row updated: a conflict)

A conflict is a statement that changed no row, not an error, so it fails that write alone and the
transaction goes on. Subclasses give the statements, run a batch, read keys and list a range.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import anyio.to_thread

from orchestra.errors import StorageConflictError, StorageError
from orchestra.storage._base import ABSENT, Expect, validate_key, validate_prefix
from orchestra.storage._group_commit import (
    Change,
    Delete,
    DeletePrefix,
    GroupCommit,
    Outcome,
    Pending,
    Write,
)

__all__ = ["TABLE", "SQLStorage", "prefix_range"]

TABLE = "orchestra_storage"


def prefix_range(prefix: str) -> tuple[str, str | None]:
    """``(low, high)``: the keys that start with ``prefix`` are exactly those with ``low <= key < high``
    (no upper bound when ``high`` is None), a range an index answers without reading past it."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop()) + 1
        if last <= 0x10FFFF:
            if 0xD800 <= last <= 0xDFFF:  # surrogates are no characters of a UTF-8 key
                last = 0xE000
            return prefix, "".join(chars) + chr(last)
    return prefix, None


class SQLStorage(abc.ABC):
    """A storage in one SQL table, written through group commit (see the module docstring)."""

    where: str  # names the database in messages: ``sqlite:/data/app.db``, ``postgresql://host/db``

    def __init__(self, *, max_batch: int = 1000) -> None:
        self.group = GroupCommit(self, where=self.where, max_changes=max_batch)

    # -- what a database gives (blocking; run in worker threads) ---------------------------------------

    @abc.abstractmethod
    def commit(self, batch: Sequence[Pending]) -> None:
        """Apply ``batch`` in one transaction (the ``Committer`` protocol; see ``settle``)."""

    @abc.abstractmethod
    def _select(self, keys: Sequence[str]) -> dict[str, tuple[bytes, str]]:
        """The value and version of each of ``keys`` that exists."""

    @abc.abstractmethod
    def _select_keys(
        self, low: str, high: str | None, start_after: str | None, limit: int | None
    ) -> list[str]:
        """The keys in ``[low, high)`` after ``start_after``, sorted, at most ``limit``."""

    @abc.abstractmethod
    def _select_versions(self, low: str, high: str | None) -> list[tuple[str, str]]:
        """``(key, version)`` of the keys in ``[low, high)``, sorted."""

    # -- shared by every database ----------------------------------------------------------------------

    @staticmethod
    def statement(pending: Pending) -> tuple[str, tuple[object, ...]]:
        """Which statement applies a change (``upsert``, ``insert``, ``update``, ``delete``, ``delete_range``)
        and its parameters, in the order the subclass's statement takes them."""
        change = pending.change
        if isinstance(change, Write):
            if change.expect is None:
                return "upsert", (change.key, change.data, pending.version)
            if change.expect is ABSENT:
                return "insert", (change.key, change.data, pending.version)
            return "update", (change.data, pending.version, change.key, change.expect)
        if isinstance(change, Delete):
            return "delete", (change.key,)
        assert isinstance(change, DeletePrefix)  # Sync is for storages that write before they commit
        low, high = prefix_range(change.prefix)
        return "delete_range", (low, high)

    def settle(self, pending: Pending, rows: int) -> None:
        """Record a change's outcome from how many rows its statement changed (inside the transaction:
        its caller is told only once the batch's COMMIT is over, by ``GroupCommit``)."""
        change = pending.change
        if isinstance(change, Write):
            if rows or change.expect is None:
                pending.succeed(pending.version)
            else:
                pending.fail(_conflict(self.where, change.key, change.expect))
        elif isinstance(change, Delete):
            pending.succeed(None)
        else:
            pending.succeed(rows)

    def applied(self, batch: Sequence[Pending]) -> list[bool]:
        """Read back (after a lost commit answer): a write is made if its key holds its version, a delete
        if its key is gone; a prefix deletion is simply run again."""
        keys = sorted({p.key for p in batch if not isinstance(p.change, DeletePrefix)})
        found = self._select(keys) if keys else {}
        made = []
        for pending in batch:
            if isinstance(pending.change, Write):
                made.append(found.get(pending.key, (b"", ""))[1] == pending.version)
            else:
                made.append(isinstance(pending.change, Delete) and pending.key not in found)
        return made

    async def _run(self, changes: Sequence[Change]) -> list[Pending]:
        # Not cancellable while it waits: a caller must hear how its change ended.
        return await anyio.to_thread.run_sync(self.group.run, changes)

    @staticmethod
    def _raise_first(settled: Sequence[Pending]) -> None:
        for pending in settled:
            if pending.error is not None:
                raise pending.error

    # -- the Storage protocol ----------------------------------------------------------------------------

    async def read(self, key: str) -> tuple[bytes, str] | None:
        validate_key(key)
        found = await anyio.to_thread.run_sync(self._select, [key])
        return found.get(key)

    async def read_many(self, keys: Sequence[str]) -> list[tuple[bytes, str] | None]:
        """Several reads in one query."""
        keys = [validate_key(key) for key in keys]
        found = await anyio.to_thread.run_sync(self._select, keys) if keys else {}
        return [found.get(key) for key in keys]

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        validate_key(key)
        [pending] = await self._run([Write(key, bytes(data), expect)])
        self._raise_first([pending])
        assert isinstance(pending.result, str)
        return pending.result

    async def write_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Several unconditional writes in one transaction."""
        changes = [Write(validate_key(key), bytes(data)) for key, data in items]
        self._raise_first(await self._run(changes))

    async def delete(self, key: str) -> None:
        validate_key(key)
        self._raise_first(await self._run([Delete(key)]))

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Several deletes in one transaction."""
        changes = [Delete(validate_key(key)) for key in keys]
        self._raise_first(await self._run(changes))

    async def delete_prefix(self, prefix: str) -> int:
        validate_prefix(prefix)
        [pending] = await self._run([DeletePrefix(prefix)])
        self._raise_first([pending])
        assert isinstance(pending.result, int)
        return pending.result

    async def commit_many(self, changes: Sequence[Change]) -> list[Outcome]:
        """Several changes in one transaction, each with its own outcome (see ``commit_many``)."""
        for change in changes:
            if isinstance(change, DeletePrefix):
                validate_prefix(change.prefix)
            else:
                validate_key(change.key)
        return [pending.outcome() for pending in await self._run(changes)]

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        validate_prefix(prefix)
        low, high = prefix_range(prefix)
        return await anyio.to_thread.run_sync(self._select_keys, low, high, start_after, limit)

    async def list_versions(self, prefix: str) -> Sequence[tuple[str, str]]:
        """``(key, version)`` of every key under ``prefix``, sorted, in one query without the values."""
        validate_prefix(prefix)
        low, high = prefix_range(prefix)
        return await anyio.to_thread.run_sync(self._select_versions, low, high)


def _conflict(where: str, key: str, expect: Expect) -> StorageError:
    if expect is ABSENT:
        message = f"cannot create {key!r} in {where}: it already exists"
    else:
        message = f"cannot update {key!r} in {where}: it is no longer at version {expect}"
    return StorageConflictError(message, operation="write", key=key, reason="the condition did not hold")
