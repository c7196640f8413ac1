"""Each workspace's memory, and the namespace each caller is bound to. No HTTP.

A workspace's ``MemoryStore`` keeps its items under ``ws/<workspace>/memory/`` of the server's storage,
so one workspace's items are not even named in another's keys. Inside it, a caller is bound to a root
namespace: ``("users", <subject>)`` when auth names a user, ``("workspace",)`` for an API key (a key
stands for its whole workspace). Every namespace a caller gives, to the routes or through the agent's
memory tools, is under that root, and what is answered names namespaces without it: a caller can neither
name nor see another's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestra.hosting.memory_settings import MemorySettings
from orchestra.memory import MemoryItem, MemoryStore
from orchestra.memory.binding import (
    MEMORY_NAMESPACE_STATE_KEY,
    MEMORY_STATE_KEY,
    checked_namespace,
    load_embedder,
    search_query,
)
from orchestra.storage import Storage

__all__ = ["HostedItem", "WorkspaceMemory"]

KEY_CALLER_ROOT = ("workspace",)


@dataclass(frozen=True)
class HostedItem:
    """An item as a caller sees it: its namespace relative to the caller's root."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    score: float | None

    def plain(self) -> dict[str, Any]:
        return {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "score": self.score,
        }


def _iso(seconds: float | None) -> str | None:
    return (
        None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    )


class WorkspaceMemory:
    """The memory stores of every workspace (made on first use) and each caller's view of them.

    Args:
        storage_of: a workspace's part of the server's storage (``Workspaces.storage``).
        settings: the server config's ``memory:`` (its embedder is imported at the first store).
    """

    def __init__(self, storage_of: Callable[[str], Storage], settings: MemorySettings | None = None) -> None:
        self._storage_of = storage_of
        self.settings = settings or MemorySettings()
        self._embedder: Any = None
        self._stores: dict[str, tuple[Storage, MemoryStore]] = {}

    def store(self, workspace: str) -> MemoryStore:
        """The workspace's store (remade when the workspace's storage view is: tests wrap the root)."""
        storage = self._storage_of(workspace)
        cached = self._stores.get(workspace)
        if cached is None or cached[0] is not storage:
            if self.settings.embedder is not None and self._embedder is None:
                self._embedder = load_embedder(self.settings.embedder)
            store = MemoryStore(
                storage, embedder=self._embedder, embed_fields=tuple(self.settings.embed_fields)
            )
            cached = self._stores[workspace] = (storage, store)
        return cached[1]

    @staticmethod
    def root(subject: str | None = None) -> tuple[str, ...]:
        """The namespace a caller is bound to: its user's, or its key's workspace-wide one."""
        return ("users", *checked_namespace(subject, "subject")) if subject else KEY_CALLER_ROOT

    def binding(self, workspace: str, subject: str | None = None) -> dict[str, Any]:
        """What a hosted run's invocation state holds so that its memory tools and context hook read and
        write the caller's namespace in the caller's workspace."""
        return {MEMORY_STATE_KEY: self.store(workspace), MEMORY_NAMESPACE_STATE_KEY: self.root(subject)}

    def _whole(self, subject: str | None, namespace: Sequence[str]) -> tuple[str, ...]:
        return self.root(subject) + checked_namespace(namespace)

    def _seen(self, subject: str | None, item: MemoryItem) -> HostedItem:
        root = self.root(subject)
        return HostedItem(
            tuple(item.namespace)[len(root) :],
            item.key,
            item.value,
            item.created_at,
            item.updated_at,
            item.score,
        )

    async def put(
        self,
        workspace: str,
        subject: str | None,
        namespace: Sequence[str],
        key: str,
        value: dict[str, Any],
        ttl: float | None = None,
    ) -> str:
        whole = self._whole(subject, namespace)
        return await self.store(workspace).put_async(whole, key, value, ttl=ttl)

    async def get(
        self, workspace: str, subject: str | None, namespace: Sequence[str], key: str
    ) -> HostedItem | None:
        item = await self.store(workspace).get_async(self._whole(subject, namespace), key)
        return None if item is None else self._seen(subject, item)

    async def delete(self, workspace: str, subject: str | None, namespace: Sequence[str], key: str) -> bool:
        """Whether there was an item to delete."""
        store, whole = self.store(workspace), self._whole(subject, namespace)
        if await store.get_async(whole, key) is None:
            return False
        await store.delete_async(whole, key)
        return True

    async def search(
        self,
        workspace: str,
        subject: str | None,
        namespace: Sequence[str],
        query: str | None,
        filter: dict[str, Any] | None,
        limit: int,
    ) -> list[HostedItem]:
        store, whole = self.store(workspace), self._whole(subject, namespace)
        items = await store.search_async(whole, query=search_query(store, query), filter=filter, limit=limit)
        return [self._seen(subject, item) for item in items]

    async def list_namespaces(
        self, workspace: str, subject: str | None, prefix: Sequence[str], limit: int
    ) -> list[tuple[str, ...]]:
        root = self.root(subject)
        found = await self.store(workspace).list_namespaces_async(
            root + checked_namespace(prefix), limit=limit
        )
        return [tuple(namespace)[len(root) :] for namespace in found]
