"""``PrefixedStorage``: one storage seen through a key prefix (a tenant's, a workspace's corner)."""

from __future__ import annotations

from collections.abc import Sequence

from orchestra.storage._base import Expect, Storage, delete_many, read_many, validate_key, write_many

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

    async def delete_many(self, keys: Sequence[str]) -> None:
        await delete_many(self.inner, [self.prefix + validate_key(key) for key in keys])

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        after = self.prefix + start_after if start_after is not None else None
        keys = await self.inner.list(self.prefix + prefix, start_after=after, limit=limit)
        return [k[len(self.prefix) :] for k in keys]

    async def delete_prefix(self, prefix: str) -> int:
        return await self.inner.delete_prefix(self.prefix + prefix)
