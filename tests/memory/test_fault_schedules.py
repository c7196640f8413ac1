"""Faults at random points of random memory workloads (hypothesis), against a model of what the store
must hold: a call that fails before its write (a full disk, an outage) changes nothing; one whose answer
is lost (the write was made) leaves the item either as it was or as written, never anything else; a
conflict changes nothing; every item the store shows is one the model holds, whole. More examples with
``ORCHESTRA_STRESS=1``."""

from __future__ import annotations

import os

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra.errors import StorageConflictError, StorageError
from orchestra.memory import MemoryStore
from orchestra.storage import ABSENT, InMemoryStorage
from orchestra.testing import FaultyStorage, HashEmbedder

EXAMPLES = 400 if os.environ.get("ORCHESTRA_STRESS") == "1" else 60
NAMESPACES = [("u", "a"), ("u", "b"), ("u", "a", "notes")]
KEYS = ["k1", "k2", "k3"]

operations = st.tuples(
    st.sampled_from(["put", "put_absent", "put_cas", "put_stale", "delete", "delete_cas", "forget", "sweep"]),
    st.sampled_from(NAMESPACES),
    st.sampled_from(KEYS),
    st.integers(0, 999),
    # A fault for this call: none, or on an operation, before or after it takes effect.
    st.one_of(
        st.none(),
        st.tuples(
            st.sampled_from(["read", "write", "delete", "list"]),
            st.sampled_from(["full", "unavailable"]),
            st.booleans(),
        ),
    ),
)


async def run(schedule) -> None:
    storage = FaultyStorage(InMemoryStorage())
    now = [1000.0]
    store = MemoryStore(storage, embedder=HashEmbedder(16), clock=lambda: now[0])
    model: dict[tuple[tuple[str, ...], str], dict] = {}
    for step, (op, ns, key, n, fault) in enumerate(schedule):
        now[0] += 1
        value = {"text": f"note {n}", "n": n}
        current = await store.get_async(ns, key)
        assert (current.value if current else None) == model.get((ns, key)), f"step {step}: before {op}"
        storage.faults.clear()
        if fault is not None:
            storage.fail(fault[0], kind=fault[1], after=fault[2])
        try:
            if op == "put":
                version = await store.put_async(ns, key, value)
            elif op == "put_absent":
                version = await store.put_async(ns, key, value, expect=ABSENT)
            elif op == "put_cas":
                version = await store.put_async(ns, key, value, expect=current.version if current else ABSENT)
            elif op == "put_stale":
                version = await store.put_async(ns, key, value, expect="not-a-version")
            elif op == "delete":
                await store.delete_async(ns, key)
            elif op == "delete_cas":
                await store.delete_async(ns, key, expect=current.version if current else ABSENT)
            elif op == "forget":
                await store.forget_async(ns[:1] if n % 2 else ns)
            else:
                await store.sweep_expired_async()
        except StorageConflictError:
            conflicted = op in ("put_stale",) or (op == "put_absent" and current is not None)
            assert conflicted, f"step {step}: {op} conflicted with nothing to conflict with"
        except StorageError as exc:
            storage.faults.clear()  # a planned fault the call did not reach must not hit the checks
            if fault is None:
                pytest.fail(f"step {step}: {op} failed with no fault injected: {exc}")
            after = await store.get_async(ns, key)
            seen = after.value if after else None
            if not fault[2]:  # refused before the write: nothing changed
                assert seen == model.get((ns, key)), f"step {step}: a refused {op} changed the item"
            else:  # the answer was lost: it was made or not, nothing else
                written = None if op.startswith("delete") else value
                assert seen in (model.get((ns, key)), written), f"step {step}: {op} left {seen}"
                if seen is None:
                    model.pop((ns, key), None)
                else:
                    model[(ns, key)] = seen
            if op == "forget":  # forget is one delete_prefix: it ran (no fault reaches it) or not at all
                for mns, mkey in list(model):
                    got = await store.get_async(mns, mkey)
                    if got is None:
                        model.pop((mns, mkey))
        else:
            storage.faults.clear()
            if op in ("put", "put_absent", "put_cas"):
                model[(ns, key)] = value
                stored = await store.get_async(ns, key)
                assert stored is not None
                assert stored.version == version
            elif op in ("delete", "delete_cas"):
                model.pop((ns, key), None)
            elif op == "forget":
                prefix = ns[:1] if n % 2 else ns
                for mns, mkey in list(model):
                    if mns[: len(prefix)] == prefix:
                        model.pop((mns, mkey))
            if op == "put_stale" or (op == "put_absent" and current is not None):
                pytest.fail(f"step {step}: {op} should have conflicted")
        storage.faults.clear()
        shown = {(i.namespace, i.key): i.value for i in await store.search_async(("u",), limit=100)}
        assert shown == model, f"step {step}: after {op} the store shows {shown}, the model {model}"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, min_size=1, max_size=25))
def test_faults_at_random_points_never_lose_or_invent_an_item(schedule) -> None:
    anyio.run(run, schedule)
