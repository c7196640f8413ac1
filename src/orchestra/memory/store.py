"""``MemoryStore``: memories that outlive a session, in namespaces, on any orchestra storage.

Each item is one storage key (see ``_records`` for the layout), so the store inherits the storage's
guarantees as they are: a put returns once the storage acknowledged the write (on SQLite and PostgreSQL
through group commit: concurrent puts share a transaction), ``expect=`` is the storage's own conditional
write, and a value over ``EncryptedStorage`` is encrypted. Nothing is cached in process: every process on
one storage sees every other's puts, deletes and ``forget`` at once.

Search reads the items under the namespace prefix (one ``list``, then reads in batches), applies the
filter, and ranks the rest by cosine similarity with NumPy, exactly; ties by namespace and key. The same
query therefore gives the same results on every backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestra._sync import run_sync
from orchestra.errors import ConfigurationError, StorageConflictError
from orchestra.memory._records import (
    Index,
    MemoryItem,
    Record,
    build_index,
    check_filter,
    decode_record,
    encode_record,
    encode_tombstone,
    encode_vector,
    item_key,
    matches,
    namespace_of,
    rank,
    text_to_embed,
)
from orchestra.memory._records import (
    namespace_prefix as prefix_key,
)
from orchestra.memory.embedders import Embedder
from orchestra.storage import ABSENT, Expect, Storage, list_versions, read_many
from orchestra.storage import scrub as scrub_storage

__all__ = ["MemoryStore"]

_BATCH = 1000  # keys read at once by search and sweep
_PUT_ATTEMPTS = 3  # reads and conditional writes of a plain put that races other writers


def _need_numpy() -> None:
    try:
        import numpy  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the installed extras
        from orchestra._dist import install_hint

        raise ConfigurationError("MemoryStore's search needs NumPy: " + install_hint("memory")) from None


class MemoryStore:
    """Namespaced JSON items with TTLs, semantic search and provable erasure, over a ``Storage``.

    Args:
        storage: where the items live (``InMemoryStorage``, ``LocalFileStorage``, ``SQLiteStorage``,
            ``PostgresStorage``, or any of them wrapped, e.g. in ``EncryptedStorage``).
        embedder: embeds items for ``search(query=...)`` (``BedrockEmbedder``, ``OpenAIEmbedder``,
            ``orchestra.testing.HashEmbedder``); without one, search filters and orders by recency only.
        embed_fields: the value's fields (dotted paths) whose text is embedded, joined by newlines.
        prefix: the storage key prefix every item goes under.
        store_vectors: False keeps embeddings out of storage: they are computed again, at each search,
            from the items' text (see docs/memory.md, "What a vector leaks").
        clock: seconds since the epoch (tests pass a fake one to run TTLs without sleeping).
        cache_items: decoded records kept between searches, by version (only decoding is saved: every
            search reads the storage, so it sees every process's writes).
    """

    def __init__(
        self,
        storage: Storage,
        *,
        embedder: Embedder | None = None,
        embed_fields: Sequence[str] = ("text",),
        prefix: str = "memory/",
        store_vectors: bool = True,
        clock: Callable[[], float] = time.time,
        cache_items: int = 100_000,
    ) -> None:
        if isinstance(embed_fields, str):
            raise ConfigurationError(
                f"embed_fields is a tuple of field names, not the string {embed_fields!r}"
            )
        self.storage = storage
        self.embedder = embedder
        self.embed_fields = tuple(embed_fields)
        self.prefix = prefix if prefix.endswith("/") else f"{prefix}/"
        self.store_vectors = store_vectors
        self.clock = clock
        self.cache_items = cache_items
        self._decoded: dict[str, tuple[Record, str]] = {}
        # The last index built per namespace prefix, with the (key, version) listing it was built from.
        self._indexes: dict[str, tuple[list[tuple[str, str]], Index]] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({self.storage!r}, prefix={self.prefix!r})"

    # -- helpers -----------------------------------------------------------------------------------------

    def _where(self, namespace: Sequence[str], key: str) -> str:
        return f"memory item {key!r} in {tuple(namespace)!r}"

    async def _vectors(self, texts: Sequence[str], *, query: bool = False) -> list[bytes]:
        assert self.embedder is not None
        vectors = await self.embedder.embed(list(texts), query=query)
        if len(vectors) != len(texts):
            raise ValueError(f"{self.embedder!r} returned {len(vectors)} embeddings for {len(texts)} texts")
        return [encode_vector(vector) for vector in vectors]

    async def _read(self, skey: str) -> tuple[Record, str] | None:
        found = await self.storage.read(skey)
        return None if found is None else (decode_record(*found), found[1])

    def _conflict(self, namespace: Sequence[str], key: str, why: str, skey: str) -> StorageConflictError:
        return StorageConflictError(
            f"{self._where(namespace, key)}: {why}; nothing was written",
            operation="write",
            key=skey,
            reason="the condition did not hold",
        )

    # -- the async face ------------------------------------------------------------------------------------

    async def put_async(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        ttl: float | None = None,
        expect: Expect = None,
    ) -> str:
        """Store ``value`` under ``namespace``/``key`` and return its new version.

        Args:
            ttl: seconds it lives; after that ``get`` and ``search`` no longer see it, and
                ``sweep_expired`` erases its value.
            expect: None writes whatever is there; ``ABSENT`` only if there is no item; a version (from
                ``get``) only if the item is still at that version.

        Raises:
            StorageConflictError: ``expect`` did not hold; nothing was written.
            ValueError: a bad namespace, key or value (not a dict of JSON values).
        """
        if not isinstance(value, Mapping):
            raise ValueError(f"{self._where(namespace, key)}: a value is a dict, not {type(value).__name__}")
        if ttl is not None and not ttl > 0:
            raise ValueError(f"{self._where(namespace, key)}: ttl is seconds > 0, not {ttl!r}")
        skey = self.prefix + item_key(namespace, key)
        vector = None
        text = text_to_embed(value, self.embed_fields) if self.embedder is not None else None
        if text is not None and self.store_vectors:
            [vector] = await self._vectors([text])  # before any write: a failing embedder stores nothing
        now = self.clock()

        def record(created: float) -> bytes:
            item = MemoryItem(
                namespace=tuple(namespace),
                key=key,
                value=dict(value),
                created_at=created,
                updated_at=now,
                expires_at=None if ttl is None else now + ttl,
                version="",
            )
            return encode_record(item, vector)

        if expect is None or expect is ABSENT:
            # Most puts make a new item: one create-only write, and only a key that exists costs a read.
            try:
                return await self.storage.write(skey, record(now), expect=ABSENT)
            except StorageConflictError:
                pass
        for attempt in range(_PUT_ATTEMPTS):
            found = await self._read(skey)
            live = found is not None and found[0].live(now)
            if expect is ABSENT and live:
                raise self._conflict(namespace, key, "it already exists (expect=ABSENT)", skey)
            condition: Expect = expect
            if expect is None or expect is ABSENT:
                # Replace exactly what was read (a tombstone or an expired item is no item), so that
                # created_at is the item's own; a plain put that keeps losing races writes regardless.
                condition = ABSENT if found is None else found[1]
                if expect is None and attempt == _PUT_ATTEMPTS - 1:
                    condition = None
            created = found[0].item.created_at if live and found and found[0].item else now
            try:
                return await self.storage.write(skey, record(created), expect=condition)
            except StorageConflictError as exc:
                if expect is not None:
                    what = "it changed since" if expect is ABSENT else f"it is no longer at version {expect}"
                    raise self._conflict(namespace, key, what, skey) from exc
        raise AssertionError("unreachable: the last attempt of a plain put is unconditional")

    async def get_async(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """The item, or None if there is none (or its TTL ran out)."""
        found = await self._read(self.prefix + item_key(namespace, key))
        if found is None or not found[0].live(self.clock()):
            return None
        assert found[0].item is not None
        return found[0].item

    async def delete_async(self, namespace: Sequence[str], key: str, *, expect: Expect = None) -> None:
        """Remove the item (no error if there is none).

        With ``expect=`` a version, only if the item is still at that version: its value is then replaced
        by a tombstone (no value, the key kept so that the condition holds against any concurrent put;
        ``forget`` removes tombstones with their namespace). ``expect=ABSENT`` only checks there is none.

        Raises:
            StorageConflictError: ``expect`` did not hold; nothing was changed.
        """
        skey = self.prefix + item_key(namespace, key)
        self._decoded.pop(skey, None)
        if expect is None:
            await self.storage.delete(skey)
            return
        if expect is ABSENT:
            found = await self._read(skey)
            if found is not None and found[0].live(self.clock()):
                raise self._conflict(namespace, key, "it exists (expect=ABSENT)", skey)
            return
        try:
            await self.storage.write(skey, encode_tombstone(self.clock()), expect=expect)
        except StorageConflictError as exc:
            raise self._conflict(namespace, key, f"it is no longer at version {expect}", skey) from exc

    async def _records(
        self, prefix: Sequence[str], listed: list[tuple[str, str]] | bool | None = True
    ) -> list[tuple[str, Record, str]]:
        """Every record under a namespace prefix: (storage key, record, version), read now. A record whose
        version is the one decoded last time is not decoded again (a version changes with every write,
        in any process, so the cache never serves a stale record; it only saves the decoding)."""
        full = self.prefix + prefix_key(prefix)
        cache = self._decoded
        if len(cache) > self.cache_items:
            cache.clear()
        # Where the storage lists versions without values (databases, memory), only the records that
        # changed since they were decoded are read; elsewhere (files) every record is read.
        if listed is True:
            listed = await list_versions(self.storage, full)
        if not isinstance(listed, list):
            keys = await self.storage.list(full)
        else:
            keys = [skey for skey, version in listed if cache.get(skey, (None, None))[1] != version]
        for start in range(0, len(keys), _BATCH):
            chunk = keys[start : start + _BATCH]
            for skey, found in zip(chunk, await read_many(self.storage, chunk), strict=True):
                if found is None:  # deleted since it was listed
                    cache.pop(skey, None)
                elif cache.get(skey, (None, None))[1] != found[1]:
                    cache[skey] = (decode_record(*found), found[1])
        present = keys if not isinstance(listed, list) else [skey for skey, _ in listed]
        self._drop_cached(full, keep=set(present))  # deleted or forgotten elsewhere: not kept here either
        out = []
        for skey in present:
            cached = cache.get(skey)
            if cached is not None:
                out.append((skey, cached[0], cached[1]))
        return out

    def _drop_cached(self, prefix: str, keep: set[str] | None = None) -> None:
        """Forget decoded records under ``prefix`` (all, or those not in ``keep``); with ``keep`` None,
        the indexes of every prefix that overlaps it too."""
        for skey in [k for k in self._decoded if k.startswith(prefix) and (keep is None or k not in keep)]:
            del self._decoded[skey]
        if keep is None:
            for full in [f for f in self._indexes if f.startswith(prefix) or prefix.startswith(f)]:
                del self._indexes[full]

    async def search_async(
        self,
        namespace_prefix: Sequence[str],
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryItem]:
        """The items under ``namespace_prefix`` (itself and every namespace below) that pass ``filter``.

        With a ``query``: the ``limit`` most similar (cosine similarity of the embeddings, in ``score``),
        best first, ties by namespace then key; items with none of ``embed_fields`` are not ranked.
        Without: the most recently updated first. ``filter`` matches the value's fields (dotted paths):
        ``{"kind": "fact"}`` is equality; the operators are ``$eq $ne $gt $gte $lt $lte $in $nin``
        (``{"stars": {"$gte": 3, "$lt": 5}}``).

        Raises:
            ConfigurationError: a query without an embedder.
            ValueError: an unknown filter operator.
        """
        check_filter(filter)
        if query is not None and self.embedder is None:
            raise ConfigurationError(
                "MemoryStore.search(query=...) needs an embedder: MemoryStore(storage, embedder=...)"
            )
        now = self.clock()
        if query is not None and self.store_vectors:
            return await self._ranked(namespace_prefix, query, filter, now, limit, offset)
        items = [
            (record.item, record.vector)
            for _, record, version in await self._records(namespace_prefix)
            if record.live(now)
            and record.item is not None
            and (not filter or matches(record.item.value, filter))
        ]
        wanted = max(0, limit) + max(0, offset)
        if query is None:
            items.sort(key=lambda pair: (-pair[0].updated_at, pair[0].namespace, pair[0].key))
            return [item for item, _ in items[offset:wanted]]
        _need_numpy()
        texts = {}
        if not self.store_vectors:
            for index, (item, _) in enumerate(items):
                text = text_to_embed(item.value, self.embed_fields)
                if text is not None:
                    texts[index] = text
            computed = await self._vectors(list(texts.values())) if texts else []
            vectors = dict(zip(texts, computed, strict=True))
            items = [(item, vectors.get(index)) for index, (item, _) in enumerate(items)]
        import numpy as np

        built = build_index([(item, vector) for item, vector in items if vector is not None])
        [query_vector] = await self._vectors([query], query=True)
        best = rank(built, query_vector, np.ones(len(built.items), dtype=bool), wanted)
        return [_scored(built.items[row], score) for row, score in best[offset:]]

    async def _ranked(
        self,
        namespace_prefix: Sequence[str],
        query: str,
        filter: Mapping[str, Any] | None,
        now: float,
        limit: int,
        offset: int,
    ) -> list[MemoryItem]:
        """A search with a query over stored vectors: the prefix's index is built again only when its
        listing of versions changed (where the storage lists versions; otherwise on every search)."""
        _need_numpy()
        import numpy as np

        full = self.prefix + prefix_key(namespace_prefix)
        listed = await list_versions(self.storage, full)
        hit = self._indexes.get(full) if listed is not None else None
        if hit is not None and hit[0] == listed:
            index = hit[1]
        else:
            records = await self._records(namespace_prefix, listed)
            index = build_index(
                [(r.item, r.vector) for _, r, _ in records if r.item is not None and r.vector is not None]
            )
            if listed is not None:
                if len(self._indexes) >= 64:  # prefixes searched lately; an old one is built again if asked
                    self._indexes.pop(next(iter(self._indexes)))
                self._indexes[full] = (listed, index)
        keep = index.expires > now
        if filter:
            keep &= np.fromiter(
                (matches(item.value, filter) for item in index.items), dtype=bool, count=len(index.items)
            )
        [query_vector] = await self._vectors([query], query=True)
        best = rank(index, query_vector, keep, max(0, limit) + max(0, offset))
        return [_scored(index.items[row], score) for row, score in best[offset:]]

    async def list_namespaces_async(
        self, prefix: Sequence[str] = (), *, max_depth: int | None = None, limit: int = 100
    ) -> list[tuple[str, ...]]:
        """The namespaces under ``prefix`` that hold items, sorted; cut to ``max_depth`` labels if given."""
        found = set()
        for skey in await self.storage.list(self.prefix + prefix_key(prefix)):
            namespace = namespace_of(skey[len(self.prefix) :])
            if namespace is not None:
                found.add(namespace if max_depth is None else namespace[:max_depth])
        return sorted(found)[:limit]

    async def forget_async(self, namespace_prefix: Sequence[str], *, scrub: bool = True) -> int:
        """Erase every item, tombstone and vector under a namespace prefix (``()``: the whole store), for
        every process at once; returns how many keys were removed.

        Args:
            scrub: then have the storage drop what it keeps of deleted data (``orchestra.storage.scrub``:
                SQLite checkpoints its log; PostgreSQL rewrites its table with ``VACUUM FULL``, which
                locks it meanwhile: pass False there and scrub in a quiet hour if that is too costly).
        """
        full = self.prefix + prefix_key(namespace_prefix)
        self._drop_cached(full)
        removed = await self.storage.delete_prefix(full)
        self._drop_cached(full)  # and what a search running meanwhile decoded
        if scrub:
            await scrub_storage(self.storage)
        return removed

    async def sweep_expired_async(self) -> int:
        """Erase the value of every item whose TTL ran out (each replaced by a tombstone, only if it was
        not written again meanwhile); returns how many."""
        now = self.clock()
        swept = 0
        for skey, record, version in await self._records(()):
            if record.item is not None and not record.live(now):
                try:
                    await self.storage.write(skey, encode_tombstone(now), expect=version)
                except StorageConflictError:
                    continue  # written again since we read it: no longer ours to sweep
                swept += 1
        return swept

    # -- the sync face ---------------------------------------------------------------------------------------

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        ttl: float | None = None,
        expect: Expect = None,
    ) -> str:
        """``put_async``, blocking."""
        return run_sync(self.put_async, namespace, key, value, ttl=ttl, expect=expect)

    def get(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """``get_async``, blocking."""
        return run_sync(self.get_async, namespace, key)

    def delete(self, namespace: Sequence[str], key: str, *, expect: Expect = None) -> None:
        """``delete_async``, blocking."""
        run_sync(self.delete_async, namespace, key, expect=expect)

    def search(
        self,
        namespace_prefix: Sequence[str],
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryItem]:
        """``search_async``, blocking."""
        return run_sync(self.search_async, namespace_prefix, query, filter, limit, offset)

    def list_namespaces(
        self, prefix: Sequence[str] = (), *, max_depth: int | None = None, limit: int = 100
    ) -> list[tuple[str, ...]]:
        """``list_namespaces_async``, blocking."""
        return run_sync(self.list_namespaces_async, prefix, max_depth=max_depth, limit=limit)

    def forget(self, namespace_prefix: Sequence[str], *, scrub: bool = True) -> int:
        """``forget_async``, blocking."""
        return run_sync(self.forget_async, namespace_prefix, scrub=scrub)

    def sweep_expired(self) -> int:
        """``sweep_expired_async``, blocking."""
        return run_sync(self.sweep_expired_async)


def _scored(item: MemoryItem, score: float) -> MemoryItem:
    from dataclasses import replace

    return replace(item, score=score)
