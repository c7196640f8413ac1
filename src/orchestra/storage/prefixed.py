"""``PrefixedStorage``: one storage seen through a key prefix (a tenant's, a workspace's corner)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from orchestra.errors import StorageError
from orchestra.storage._append import AppendStorage, appendable
from orchestra.storage._base import (
    Expect,
    Storage,
    delete_many,
    list_versions,
    read_many,
    validate_key,
    write_many,
)
from orchestra.storage._group_commit import Change, DeletePrefix, Outcome, commit_many

__all__ = ["PrefixedStorage"]


class PrefixedStorage:
    """Every key is stored under ``prefix``; listing only sees (and returns keys relative to) that prefix."""

    def __init__(self, inner: Storage, prefix: str) -> None:
        validate_key(prefix.rstrip("/"))
        self.inner = inner
        self.prefix = prefix if prefix.endswith("/") else f"{prefix}/"

    def __repr__(self) -> str:
        return f"PrefixedStorage({self.inner!r}, {self.prefix!r})"

    async def read(self, key: str) -> tuple[bytes, str] | None:
        return await self.inner.read(self.prefix + validate_key(key))

    async def read_many(self, keys: Sequence[str]) -> list[tuple[bytes, str] | None]:
        return await read_many(self.inner, [self.prefix + validate_key(key) for key in keys])

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        return await self.inner.write(self.prefix + validate_key(key), data, expect=expect)

    async def write_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        await write_many(self.inner, [(self.prefix + validate_key(key), data) for key, data in items])

    async def delete(self, key: str) -> None:
        await self.inner.delete(self.prefix + validate_key(key))

    @property
    def appends(self) -> bool:
        """Whether appends are offered: when the inner storage offers them (``AppendStorage``)."""
        return appendable(self.inner) is not None

    def _appender(self) -> AppendStorage:
        inner = appendable(self.inner)
        if inner is None:
            raise TypeError(f"{self.inner!r} does not offer appends")
        return inner

    async def append(self, key: str, data: bytes, *, at: int, tail: bytes = b"") -> int:
        return await self._appender().append(self.prefix + validate_key(key), data, at=at, tail=tail)

    async def read_from(self, key: str, offset: int) -> bytes | None:
        return await self._appender().read_from(self.prefix + validate_key(key), offset)

    async def delete_many(self, keys: Sequence[str]) -> None:
        await delete_many(self.inner, [self.prefix + validate_key(key) for key in keys])

    async def commit_many(self, changes: Sequence[Change]) -> list[Outcome]:
        """Passed on, so that the changes still share one commit where the inner storage groups them."""
        moved = [
            DeletePrefix(self.prefix + c.prefix)
            if isinstance(c, DeletePrefix)
            else dataclasses.replace(c, key=self.prefix + validate_key(c.key))
            for c in changes
        ]
        outcomes = await commit_many(self.inner, moved)
        for outcome in outcomes:  # errors name the key as the caller knows it
            if isinstance(outcome, StorageError) and outcome.key and outcome.key.startswith(self.prefix):
                outcome.key = outcome.key[len(self.prefix) :]
        return outcomes

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        after = self.prefix + start_after if start_after is not None else None
        keys = await self.inner.list(self.prefix + prefix, start_after=after, limit=limit)
        return [k[len(self.prefix) :] for k in keys]

    async def list_versions(self, prefix: str) -> Sequence[tuple[str, str]] | None:
        found = await list_versions(self.inner, self.prefix + prefix)
        return None if found is None else [(k[len(self.prefix) :], version) for k, version in found]

    async def delete_prefix(self, prefix: str) -> int:
        return await self.inner.delete_prefix(self.prefix + prefix)
