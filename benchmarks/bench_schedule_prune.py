"""The cost of pruning a schedule's tick records (``ScheduleStore.prune``); prints JSON.

A schedule every second, pruned every 600 s keeping 1,000 records, has 1,600 records when its prune runs
and deletes 600. The prune is measured on that, per backend, against its floor: the storage's own
``delete_many`` of the same 600 keys (what deleting them costs at the least), on the same storage, made
again the same way. The prune adds a listing of the records and of the open claims, a read of the floor
and its compare-and-swap.

    python benchmarks/bench_schedule_prune.py --backends file,sqlite,postgres
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _databases import database

from orchestra.hosting.scheduler import ScheduleStore
from orchestra.hosting.schedules import TickRecord, TickRetention, tick_key
from orchestra.storage import LocalFileStorage, delete_many, write_many

T0 = datetime(2026, 12, 1, tzinfo=UTC)


@contextlib.contextmanager
def storage_of(kind: str) -> Iterator[Any]:
    if kind == "file":
        with tempfile.TemporaryDirectory() as root:
            yield LocalFileStorage(root)
        return
    with database(kind) as (storage, _):
        yield storage


def records(count: int, schedule_id: str) -> list[tuple[str, bytes]]:
    made = []
    for n in range(count):
        tick = (T0 + timedelta(seconds=n)).isoformat()
        record = TickRecord(
            schedule_id=schedule_id, first=tick, last=tick, status="started", server="s", claimed_at=tick
        )
        made.append(
            (f"schedule-ticks/{schedule_id}/{tick_key(T0 + timedelta(seconds=n))}.json", record.as_json())
        )
    return made


async def measure(storage: Any, total: int, keep: int, rounds: int) -> dict[str, float]:
    store = ScheduleStore(storage, storage)
    retention = TickRetention(keep=keep)
    prunes, floors = [], []
    for round_ in range(rounds):
        pruned, floor = f"p{round_}", f"f{round_}"
        await write_many(storage, records(total, pruned))
        await write_many(storage, records(total, floor))
        # Alternating which goes first, so neither has the warmer cache every time.
        for which in (pruned, floor) if round_ % 2 == 0 else (floor, pruned):
            started = time.perf_counter()
            if which == pruned:
                deleted = await store.prune(pruned, retention, T0)
                prunes.append(time.perf_counter() - started)
                assert deleted == total - keep, deleted
            else:
                await delete_many(storage, [key for key, _ in records(total, floor)][: total - keep])
                floors.append(time.perf_counter() - started)
    prune_s, floor_s = sorted(prunes)[len(prunes) // 2], sorted(floors)[len(floors) // 2]
    return {
        "records": total,
        "deleted": total - keep,
        "prune_ms_p50": round(prune_s * 1000, 2),
        "floor_delete_many_ms_p50": round(floor_s * 1000, 2),
        "ratio": round(prune_s / floor_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="file,sqlite", help="file, sqlite, postgres")
    parser.add_argument("--records", type=int, default=1600)
    parser.add_argument("--keep", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = {}
    for kind in args.backends.split(","):
        with storage_of(kind) as storage:
            results[kind] = anyio.run(measure, storage, args.records, args.keep, args.rounds)
        print(json.dumps({kind: results[kind]}), file=sys.stderr)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
