"""The memory store's conformance suite: the same calls give the same answers on every backend (in
memory, local files, SQLite, a real PostgreSQL), search results included, checked against an oracle
written here from the definitions (cosine similarity in float64, ties by namespace then key)."""

from __future__ import annotations

import math

import anyio
import pytest

from orchestra.errors import ConfigurationError, StorageConflictError
from orchestra.memory import MemoryStore
from orchestra.storage import ABSENT
from orchestra.testing import HashEmbedder

WORDS = [
    "tea",
    "coffee",
    "green",
    "black",
    "car",
    "blue",
    "red",
    "bike",
    "train",
    "window",
    "aisle",
    "seat",
    "vegan",
    "spicy",
    "quiet",
    "email",
    "phone",
]


def corpus() -> list[tuple[tuple[str, ...], str, dict]]:
    """Items in a few namespaces, texts drawn from a small vocabulary so that many share words (and
    some tie exactly: the tie-break is part of the contract)."""
    items = []
    for n in range(48):
        user = f"u{n % 3}"
        words = [WORDS[(n * 7 + i * 5) % len(WORDS)] for i in range(1 + n % 4)]
        namespace = ("users", user, "notes") if n % 2 else ("users", user)
        items.append((namespace, f"k{n:02d}", {"text": " ".join(words), "stars": n % 6, "tag": f"t{n % 4}"}))
    return items


def oracle(query: str, items, limit: int, embedder: HashEmbedder) -> list[tuple[tuple[str, ...], str]]:
    def unit(vector):
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else vector

    q = unit(embedder.vector(query))
    scored = []
    for namespace, key, value in items:
        v = unit(embedder.vector(value["text"]))
        scored.append((-round(sum(a * b for a, b in zip(q, v, strict=True)), 6), namespace, key))
    return [(namespace, key) for _, namespace, key in sorted(scored)[:limit]]


@pytest.fixture
def store(storage) -> MemoryStore:
    return MemoryStore(storage, embedder=HashEmbedder())


def test_put_get_update_keeps_created_and_changes_version(store: MemoryStore) -> None:
    ns = ("users", "alice", "preferences")
    v1 = store.put(ns, "seat", {"text": "prefers the aisle"})
    first = store.get(ns, "seat")
    assert first is not None
    assert first.value == {"text": "prefers the aisle"}
    assert first.version == v1
    assert first.namespace == ns
    assert first.key == "seat"
    assert first.expires_at is None
    v2 = store.put(ns, "seat", {"text": "prefers the window"})
    second = store.get(ns, "seat")
    assert second is not None
    assert v2 != v1
    assert second.version == v2
    assert second.value["text"] == "prefers the window"
    assert second.created_at == first.created_at
    assert second.updated_at >= first.updated_at
    assert store.get(ns, "other") is None
    assert store.get(("users", "bob", "preferences"), "seat") is None


def test_conditional_put_and_delete(store: MemoryStore) -> None:
    ns = ("users", "alice")
    v1 = store.put(ns, "k", {"text": "one"}, expect=ABSENT)
    with pytest.raises(StorageConflictError, match="already exists"):
        store.put(ns, "k", {"text": "two"}, expect=ABSENT)
    v2 = store.put(ns, "k", {"text": "two"}, expect=v1)
    with pytest.raises(StorageConflictError, match="no longer at version"):
        store.put(ns, "k", {"text": "three"}, expect=v1)
    with pytest.raises(StorageConflictError):
        store.delete(ns, "k", expect=v1)
    assert store.get(ns, "k").value == {"text": "two"}  # type: ignore[union-attr]
    store.delete(ns, "k", expect=v2)
    assert store.get(ns, "k") is None
    assert store.search(ns) == []
    # After a conditional delete the key is free again, for exactly one creator.
    store.put(ns, "k", {"text": "four"}, expect=ABSENT)
    with pytest.raises(StorageConflictError):
        store.put(ns, "k", {"text": "five"}, expect=ABSENT)
    store.delete(ns, "k")
    assert store.get(ns, "k") is None
    store.delete(ns, "k")  # deleting nothing is no error
    store.delete(ns, "k", expect=ABSENT)


def test_search_ranks_like_the_oracle_on_every_backend(store: MemoryStore) -> None:
    items = corpus()
    put_all(store, items)
    embedder = HashEmbedder()
    for query in ["green tea", "blue car", "quiet window seat", "vegan spicy email", "train"]:
        got = store.search(("users",), query=query, limit=7)
        assert [(item.namespace, item.key) for item in got] == oracle(query, items, 7, embedder), query
        assert all(item.score is not None for item in got)
        assert [item.score for item in got] == sorted((item.score for item in got), reverse=True)  # type: ignore[type-var]
        # Scoped to one user: nobody else's item, and the same order as the oracle over that user's.
        mine = [entry for entry in items if entry[0][1] == "u1"]
        got = store.search(("users", "u1"), query=query, limit=5)
        assert [(item.namespace, item.key) for item in got] == oracle(query, mine, 5, embedder)
    # offset pages through the same ranking
    whole = store.search(("users",), query="tea", limit=10)
    assert store.search(("users",), query="tea", limit=4, offset=6) == whole[6:10]


FILTERS = [
    ({"stars": 3}, lambda v: v["stars"] == 3),
    ({"stars": {"$gte": 2, "$lt": 4}}, lambda v: 2 <= v["stars"] < 4),
    ({"stars": {"$gt": 4}}, lambda v: v["stars"] > 4),
    ({"stars": {"$lte": 1}, "tag": "t0"}, lambda v: v["stars"] <= 1 and v["tag"] == "t0"),
    ({"tag": {"$in": ["t1", "t3"]}}, lambda v: v["tag"] in ("t1", "t3")),
    (
        {"tag": {"$nin": ["t1", "t3"]}, "stars": {"$ne": 0}},
        lambda v: v["tag"] not in ("t1", "t3") and v["stars"],
    ),
    ({"tag": {"$gte": "t2"}}, lambda v: v["tag"] >= "t2"),
    ({"stars": {"$gte": "2"}}, lambda v: False),  # a range across types matches nothing
    ({"missing": 1}, lambda v: False),
    ({"missing": {"$ne": 1}}, lambda v: True),
]


def put_all(store: MemoryStore, items) -> None:
    """The items put concurrently (on databases they share commits: the suite stays quick)."""

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for namespace, key, value in items:
                group.start_soon(store.put_async, namespace, key, value)

    anyio.run(main)


def test_filters_match_json_fields(store: MemoryStore) -> None:
    items = corpus()
    put_all(store, items)
    for condition, expected in FILTERS:
        want = sorted((ns, key) for ns, key, value in items if expected(value))
        got = store.search(("users",), filter=condition, limit=100)
        assert sorted((item.namespace, item.key) for item in got) == want, condition
        # With a query, the filter holds too, and the ranking is the oracle's over the matching items.
        ranked = store.search(("users",), query="blue tea", filter=condition, limit=5)
        kept = [entry for entry in items if expected(entry[2])]
        assert [(i.namespace, i.key) for i in ranked] == oracle("blue tea", kept, 5, HashEmbedder()), (
            condition
        )


def test_filter_on_nested_fields_and_booleans(store: MemoryStore) -> None:
    store.put(("t",), "a", {"text": "x", "profile": {"tier": "gold", "active": True, "n": 1}})
    store.put(("t",), "b", {"text": "y", "profile": {"tier": "silver", "active": 1, "n": 1.0}})
    assert [i.key for i in store.search(("t",), filter={"profile.tier": "gold"})] == ["a"]
    assert [i.key for i in store.search(("t",), filter={"profile.active": True})] == ["a"]  # True is not 1
    assert sorted(i.key for i in store.search(("t",), filter={"profile.n": 1})) == ["a", "b"]  # 1 is 1.0
    with pytest.raises(ValueError, match="unknown operator"):
        store.search(("t",), filter={"profile.n": {"$gtee": 1}})


def test_search_without_query_is_most_recent_first(storage) -> None:
    now = [1000.0]
    store = MemoryStore(storage, clock=lambda: now[0])
    for n, key in enumerate(["c", "a", "b"]):
        now[0] = 1000.0 + n
        store.put(("ns",), key, {"text": key})
    assert [i.key for i in store.search(("ns",))] == ["b", "a", "c"]
    with pytest.raises(ConfigurationError, match="needs an embedder"):
        store.search(("ns",), query="anything")


def test_list_namespaces(store: MemoryStore) -> None:
    for ns in [("users", "a"), ("users", "a", "notes"), ("users", "b"), ("teams", "x")]:
        store.put(ns, "k", {"text": "t"})
    assert store.list_namespaces() == [
        ("teams", "x"),
        ("users", "a"),
        ("users", "a", "notes"),
        ("users", "b"),
    ]
    assert store.list_namespaces(("users",)) == [("users", "a"), ("users", "a", "notes"), ("users", "b")]
    assert store.list_namespaces(("users",), max_depth=2) == [("users", "a"), ("users", "b")]
    assert store.list_namespaces(limit=1) == [("teams", "x")]


def test_odd_labels_and_keys_round_trip_and_stay_apart(store: MemoryStore) -> None:
    labels = ["a/b", ".hidden", "~", "%41", "ünï cødé", "..", "a"]
    for label in labels:
        store.put(("odd", label), label, {"text": label})
    assert sorted(store.list_namespaces(("odd",))) == sorted(("odd", label) for label in labels)
    for label in labels:
        item = store.get(("odd", label), label)
        assert item is not None
        assert item.value == {"text": label}
    # ("odd", "a") does not contain ("odd", "a/b")'s items: labels are not paths.
    assert [i.key for i in store.search(("odd", "a"))] == ["a"]
    with pytest.raises(ValueError):
        store.put(("odd", ""), "k", {})
    with pytest.raises(ValueError):
        store.put((), "k", {})
    with pytest.raises(ValueError):
        store.put(("odd",), "k", ["not", "a", "dict"])  # type: ignore[arg-type]


def test_ttl_hides_then_sweep_erases(storage) -> None:
    now = [1000.0]
    store = MemoryStore(storage, embedder=HashEmbedder(), clock=lambda: now[0])
    store.put(("u",), "short", {"text": "green tea"}, ttl=10)
    store.put(("u",), "long", {"text": "green tea"}, ttl=100)
    store.put(("u",), "forever", {"text": "green tea"})
    now[0] = 1011.0
    assert store.get(("u",), "short") is None
    assert store.get(("u",), "long") is not None
    assert sorted(i.key for i in store.search(("u",), query="tea")) == ["forever", "long"]
    # An expired item is no item: ABSENT creates over it (and keeps nothing of it).
    store.put(("u",), "short", {"text": "renewed"}, expect=ABSENT, ttl=10)
    assert store.get(("u",), "short").created_at == 1011.0  # type: ignore[union-attr]
    now[0] = 1200.0
    assert store.sweep_expired() == 2
    assert store.sweep_expired() == 0
    assert [i.key for i in store.search(("u",))] == ["forever"]


def test_forget_erases_a_prefix_and_nothing_else(store: MemoryStore) -> None:
    put_all(store, corpus())
    v = store.put(("users", "u1"), "gone", {"text": "x"})
    store.delete(("users", "u1"), "gone", expect=v)  # a tombstone: forget takes it too
    before_u0 = store.search(("users", "u0"), limit=100)
    assert store.forget(("users", "u1")) == 17
    assert store.search(("users", "u1"), limit=100) == []
    assert store.list_namespaces(("users", "u1")) == []
    assert store.search(("users", "u0"), limit=100) == before_u0
    assert store.forget(("users", "u1")) == 0


def test_a_store_sees_another_stores_writes_at_once(storage) -> None:
    """Two stores on one storage stand for two processes: what one decoded and kept is never served
    after the other changed, deleted or forgot it."""
    first = MemoryStore(storage, embedder=HashEmbedder())
    second = MemoryStore(storage, embedder=HashEmbedder())
    first.put(("u", "a"), "tea", {"text": "likes green tea"})
    first.put(("u", "b"), "car", {"text": "drives a blue car"})
    assert [i.key for i in first.search(("u",), query="green tea", limit=1)] == ["tea"]  # decoded, kept
    second.put(("u", "a"), "tea", {"text": "now prefers coffee"})
    assert [i.value["text"] for i in first.search(("u", "a"))] == ["now prefers coffee"]
    fresh = MemoryStore(storage, embedder=HashEmbedder())  # nothing kept: what first must answer
    assert first.search(("u",), query="green tea") == fresh.search(("u",), query="green tea")
    ranked = first.search(("u",), query="prefers coffee", limit=1)
    assert [(i.key, i.value["text"]) for i in ranked] == [("tea", "now prefers coffee")]
    second.delete(("u", "a"), "tea")
    assert first.search(("u", "a")) == []
    assert [i.key for i in first.search(("u",), query="prefers coffee")] == ["car"]
    assert second.forget(("u",)) == 1
    assert first.search(("u",)) == []
    assert first.search(("u",), query="blue car") == []
