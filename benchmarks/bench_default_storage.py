"""Which storage the CLI should default to (issue 33 item 5): local files, whose journal appends its
records to a segment per scope (one fdatasync a record), against SQLite (WAL, ``synchronous=FULL``,
group commit), in the same run, against the same floors, with the targets beside them:

- W1 durable per-node saves (a 200-node chain): the run without a session plus one fdatasync'd append
  per node of the size of the records (target <= 1.5x);
- W1 saved per invocation: the run without a session plus one JSON encode and one fdatasync'd write of
  the final state (target <= 1.15x);
- W3, 300 turns saved per message: as many fdatasync'd appends as saves, 603 (target <= 2x);
- W7, a 1,000-item map of 1 ms items saved: the same coroutines in plain anyio tasks (target <= 2x).

Each round runs every figure on both storages back to back, each beside its floor. The machine is shared
and an fdatasync's cost moves tenfold within seconds, so two ratios are printed: the best time over the
best floor across rounds, and the median (and range) of the per-round ratios.

    python benchmarks/bench_default_storage.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import anyio
from _databases import database
from _measure import fsynced_appends
from bench_orchestration import chain, one_ms_item, plain_anyio, timed_run
from bench_sessions import run as w3

from orchestra.multiagent import Graph, Map
from orchestra.session import SnapshotSessionManager, export_scope
from orchestra.storage import LocalFileStorage, Storage
from orchestra.testing import CountingStorage

NODES, TURNS, ITEMS = 200, 300, 1000
KINDS = ("local", "sqlite")


@contextlib.contextmanager
def fresh(kind: str) -> Iterator[Storage]:
    if kind == "sqlite":
        with database("sqlite") as (storage, _):
            yield storage
        return
    with tempfile.TemporaryDirectory() as root:
        yield LocalFileStorage(root)


async def w1(kind: str, mode: str) -> tuple[float, int, int]:
    """Seconds for the chain saved per ``mode``, the bytes and writes it handed to the storage."""
    with fresh(kind) as inner:
        storage = CountingStorage(inner)
        manager = SnapshotSessionManager("bench", storage=storage, multi_agent_save_latest_on=mode)
        seconds = await timed_run(chain(NODES, session_manager=manager))
        return seconds, storage.bytes_written, storage.writes


async def w7(kind: str) -> float:
    items = list(range(ITEMS))
    with fresh(kind) as storage:
        graph = Graph(
            {"split": lambda: items, "each": Map(one_ms_item)},
            [("split", "each")],
            id="w7",
            session_manager=SnapshotSessionManager("w7", storage=storage),
        )
        started = time.perf_counter()
        result = await graph.invoke_async("fan out")
        assert result.output == [i * 2 for i in items], result.reason
        return time.perf_counter() - started


async def final_state_write() -> float:
    """One JSON encode and one fdatasync'd write of W1's final state: what saving per invocation cannot
    cost less than."""
    with tempfile.TemporaryDirectory() as root:
        storage = LocalFileStorage(root)
        manager = SnapshotSessionManager("bench", storage=storage, multi_agent_save_latest_on="invocation")
        await timed_run(chain(NODES, session_manager=manager))
        state = json.loads(await export_scope(storage, "bench", "multiAgent", "chain"))
    started = time.perf_counter()
    encoded = json.dumps(state, separators=(",", ":")).encode()
    return time.perf_counter() - started + fsynced_appends(1, len(encoded))


async def round_of(kind: str, write_once: float) -> dict[str, tuple[float, float]]:
    """One round of every figure on ``kind``: ``(seconds, its floor's seconds)``, the floor measured right
    beside it."""
    no_session = await timed_run(chain(NODES))
    seconds, bytes_written, writes = await w1(kind, "node")
    figures = {"w1_saves": (seconds, no_session + fsynced_appends(writes, bytes_written // writes))}
    no_session = await timed_run(chain(NODES))
    seconds = (await w1(kind, "invocation"))[0]
    figures["w1_per_invocation"] = (seconds, no_session + write_once)
    with fresh(kind) as storage:
        turns = await w3(storage, TURNS, "none")
    size = turns["bytes_written"] // turns["writes"]
    figures["w3"] = (turns["total_seconds"], fsynced_appends(turns["writes"], size))
    started = time.perf_counter()
    await plain_anyio(list(range(ITEMS)))
    floor = time.perf_counter() - started
    figures["w7_saved"] = (await w7(kind), floor)
    return figures


async def main(repeat: int) -> None:
    await timed_run(chain(NODES))  # warm up
    await w7("local")
    write_once = await final_state_write()
    rounds: dict[str, list[dict[str, tuple[float, float]]]] = {kind: [] for kind in KINDS}
    for _ in range(repeat):
        for kind in KINDS:
            rounds[kind].append(await round_of(kind, write_once))
    targets = {"w1_saves": 1.5, "w1_per_invocation": 1.15, "w3": 2.0, "w7_saved": 2.0}

    def summary(kind: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in targets:
            pairs = [r[name] for r in rounds[kind]]
            best, best_floor = min(p[0] for p in pairs), min(p[1] for p in pairs)
            ratios = sorted(p[0] / p[1] for p in pairs)
            out[name] = {
                "best_seconds": round(best, 4),
                "best_floor_seconds": round(best_floor, 4),
                "best_over_best_floor": round(best / best_floor, 2),
                "per_round_ratio_median": round(statistics.median(ratios), 2),
                "per_round_ratio_range": [round(ratios[0], 2), round(ratios[-1], 2)],
            }
        return out

    print(
        json.dumps(
            {
                "benchmark": "default_storage",
                "rounds": repeat,
                "floors": {
                    "w1_saves": "the run without a session + one fdatasync'd append per record",
                    "w1_per_invocation": "the run without a session + one encode and fdatasync'd write "
                    f"of the final state ({write_once * 1e3:.1f} ms)",
                    "w3": "as many fdatasync'd appends as saves (603), of their mean size",
                    "w7_saved": "the same coroutines in plain anyio tasks",
                },
                "targets": targets,
                **{kind: summary(kind) for kind in KINDS},
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    anyio.run(main, parser.parse_args().repeat)
