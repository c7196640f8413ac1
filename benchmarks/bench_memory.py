"""MemoryStore's cost against its floors (issue 36 item 6); prints JSON.

- **put**: ``--puts`` puts from ``--tasks`` concurrent tasks (with ``HashEmbedder``), against the backend's
  own write floor: the same number of ``storage.write`` calls of records of the same size, from as many
  tasks, on a fresh storage of the same kind (group commit shares commits in both). On SQLite and
  PostgreSQL the driver alone (one durable commit per row, no framework) is printed beside it.
- **search**: p50/p99 of ``search(query=..., limit=10)`` over ``--items`` items (10,000; ``--large``:
  100,000) under one namespace prefix, against the raw index's query alone: a NumPy brute force over the
  same unit vectors already in memory (``matrix @ q`` and a top-k). sqlite-vec cannot load in this
  Python (no ``enable_load_extension``) and pgvector is not installed here, so NumPy is the raw index.
- **memory per item**: bytes of storage per item (the records' size) and the Python heap a search needs.

Targets: search within 1.5x the raw index; put within 1.3x the write floor.

    python benchmarks/bench_memory.py --backends memory,sqlite,postgres
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _databases import commit_floor, database

from orchestra.memory import MemoryStore
from orchestra.storage import InMemoryStorage, LocalFileStorage, read_many, write_many
from orchestra.testing import HashEmbedder

WORDS = [f"w{n}" for n in range(2000)]
DIMENSIONS = 256


def text(n: int) -> str:
    return " ".join(WORDS[(n * 7919 + i * 104729) % len(WORDS)] for i in range(12))


class Fresh:
    """A fresh storage of one kind, closed (and dropped) on exit."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __enter__(self) -> Any:
        if self.kind == "memory":
            return InMemoryStorage()
        if self.kind == "local":
            self._tmp = tempfile.TemporaryDirectory()
            return LocalFileStorage(self._tmp.name)
        self._db = database(self.kind)
        storage, _ = self._db.__enter__()
        return storage

    def __exit__(self, *exc: object) -> None:
        if self.kind == "local":
            self._tmp.cleanup()
        elif self.kind in ("sqlite", "postgres"):
            self._db.__exit__(None, None, None)


async def put_case(kind: str, puts: int, tasks: int) -> dict[str, Any]:
    embedder = HashEmbedder(DIMENSIONS)
    per_task = puts // tasks
    with Fresh(kind) as storage:
        store = MemoryStore(storage, embedder=embedder)

        async def putter(task: int) -> None:
            for i in range(per_task):
                n = task * per_task + i
                await store.put_async(("users", f"u{n % 50}"), f"k{n}", {"text": text(n), "n": n})

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for task in range(tasks):
                group.start_soon(putter, task)
        put_seconds = time.perf_counter() - started
        keys = await storage.list("memory/")
        sample = (await read_many(storage, keys[:1]))[0]
        record = sample[0] if sample else b""
    with Fresh(kind) as storage:

        async def writer(task: int) -> None:
            for i in range(per_task):
                await storage.write(f"floor/t{task}/k{i}", record)

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for task in range(tasks):
                group.start_soon(writer, task)
        floor_seconds = time.perf_counter() - started
    out = {
        "puts": per_task * tasks,
        "tasks": tasks,
        "record_bytes": len(record),
        "put_per_s": round(per_task * tasks / put_seconds),
        "floor_writes_per_s": round(per_task * tasks / floor_seconds),
        "put_over_floor": round(put_seconds / floor_seconds, 2),
    }
    if kind in ("sqlite", "postgres"):
        count = min(300, puts)
        out["driver_alone_commits_per_s"] = round(count / commit_floor(kind, count, len(record)))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def search_case(kind: str, items: int, queries: int) -> dict[str, Any]:
    import numpy as np

    embedder = HashEmbedder(DIMENSIONS)
    # The items are made once in memory and copied to the backend in batches: the case is search.
    source = MemoryStore(InMemoryStorage(), embedder=embedder)
    for n in range(items):
        await source.put_async(("users", f"u{n % 50}"), f"k{n}", {"text": text(n), "n": n})
    keys = await source.storage.list("memory/")
    records = [found for found in await read_many(source.storage, keys) if found is not None]
    stored_bytes = sum(len(data) for data, _ in records)
    with Fresh(kind) as storage:
        for start in range(0, len(keys), 1000):
            await write_many(
                storage,
                [
                    (k, d)
                    for k, (d, _) in zip(
                        keys[start : start + 1000], records[start : start + 1000], strict=True
                    )
                ],
            )
        store = MemoryStore(storage, embedder=embedder)
        query_texts = [text(items + q) for q in range(queries)]
        await store.search_async(("users",), query=query_texts[0])  # warm: connections, imports
        timings = []
        for query in query_texts:
            started = time.perf_counter()
            found = await store.search_async(("users",), query=query, limit=10)
            timings.append(time.perf_counter() - started)
        assert len(found) == 10
        # The heap one search needs, on a store that has decoded nothing yet (measured apart: tracing
        # slows everything down).
        tracemalloc.start()
        await MemoryStore(storage, embedder=embedder).search_async(("users",), query=query_texts[0])
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    # The raw index: the same unit vectors in one matrix, in memory; the query embedded the same way.
    matrix = np.stack(
        [np.asarray(v, dtype=np.float32) for v in await embedder.embed([text(n) for n in range(items)])]
    )
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    raw = []
    for query in query_texts:
        started = time.perf_counter()
        q = np.asarray((await embedder.embed([query]))[0], dtype=np.float32)
        q /= np.linalg.norm(q)
        scores = matrix @ q
        top = np.argpartition(scores, len(scores) - 10)[-10:]
        top[np.argsort(-scores[top])]
        raw.append(time.perf_counter() - started)
    p50, p99 = percentile(timings, 0.5), percentile(timings, 0.99)
    raw50, raw99 = percentile(raw, 0.5), percentile(raw, 0.99)
    return {
        "items": items,
        "queries": queries,
        "search_p50_ms": round(p50 * 1000, 2),
        "search_p99_ms": round(p99 * 1000, 2),
        "raw_index_p50_ms": round(raw50 * 1000, 3),
        "raw_index_p99_ms": round(raw99 * 1000, 3),
        "p50_over_raw": round(p50 / raw50, 1),
        "p99_over_raw": round(p99 / raw99, 1),
        "stored_bytes_per_item": round(stored_bytes / items),
        "search_heap_bytes_per_item": round(peak / items),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="memory,local,sqlite,postgres")
    parser.add_argument("--puts", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--large", action="store_true", help="search over 100,000 items too")
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    results: dict[str, Any] = {"load_average": os.getloadavg()[0], "backends": {}}
    for kind in args.backends.split(","):
        entry: dict[str, Any] = {
            "put": await put_case(kind, args.puts if kind != "local" else min(args.puts, 500), args.tasks)
        }
        sizes = [args.items] + ([100_000] if args.large else [])
        entry["search"] = [
            await search_case(kind, size, args.queries if size <= 10_000 else 20) for size in sizes
        ]
        results["backends"][kind] = entry
        print(json.dumps({kind: entry}), file=sys.stderr)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    anyio.run(main)
