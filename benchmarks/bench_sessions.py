"""Session persistence cost as a conversation grows: 300 turns, saving after every message.

One agent with a ``NullConversationManager`` (the history grows to 600 messages) and
``save_latest_on="message"``, on ``LocalFileStorage`` and on S3 (moto's server on 127.0.0.1). Prints one
JSON object per backend: total seconds, the last-50 / first-50 turn time ratio (target <= 1.3), bytes
written and their ratio to the size of the final exported snapshot (target <= 3x on local files).

With ``--retention`` it measures what a long session keeps on disk instead: 10,000 turns (``--turns``) on
local files, a sliding window of 40 messages, an immutable snapshot every 100 turns with
``keep_snapshots=3``, and folded journal records deleted at once (``Compaction(delete_after=0)``). It prints
the bytes on disk at the end (every file of the session) and their ratio to the final state's export, next
to the same run keeping every record (``delete_after=None``).

    python benchmarks/bench_sessions.py [--turns 300] [--backend local|s3|all]
    python benchmarks/bench_sessions.py --retention [--turns 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

from orchestra import Agent
from orchestra.conversation import NullConversationManager, SlidingWindowConversationManager
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.storage import LocalFileStorage, S3Storage, Storage
from orchestra.testing import CountingStorage, ScriptedModel


async def run(storage: Storage, turns: int, backend: str) -> dict[str, Any]:
    counting = CountingStorage(storage)
    manager = SnapshotSessionManager("bench", storage=counting, save_latest_on="message")
    replies = [f"Reply {i}: the summary of the previous answer fits in one sentence." for i in range(turns)]
    agent = Agent(
        model=ScriptedModel(replies), conversation_manager=NullConversationManager(), session_manager=manager
    )
    durations = []
    started = time.perf_counter()
    for i in range(turns):
        t0 = time.perf_counter()
        await agent.invoke_async(f"Turn {i}: please summarise the previous answer in one sentence.")
        durations.append(time.perf_counter() - t0)
    total = time.perf_counter() - started
    exported = await manager.export("default")
    first, last = sum(durations[:50]) / 50, sum(durations[-50:]) / 50
    return {
        "benchmark": "session_turns",
        "backend": backend,
        "turns": turns,
        "messages": len(agent.messages),
        "total_seconds": round(total, 3),
        "first_50_mean_ms": round(first * 1000, 3),
        "last_50_mean_ms": round(last * 1000, 3),
        "last_50_over_first_50": round(last / first, 3),
        "writes": counting.writes,
        "bytes_written": counting.bytes_written,
        "export_bytes": len(exported),
        "bytes_written_over_export": round(counting.bytes_written / len(exported), 3),
    }


def _files_and_bytes(root: Path) -> tuple[int, int]:
    sizes = [p.stat().st_size for p in root.rglob("*") if p.is_file()]
    return len(sizes), sum(sizes)


async def retention(root: Path, turns: int, delete: bool) -> dict[str, Any]:
    compaction = Compaction(delete_after=timedelta(0) if delete else None)
    manager = SnapshotSessionManager(
        "long",
        storage=LocalFileStorage(root),
        save_latest_on="message",
        compaction=compaction,
        keep_snapshots=3 if delete else None,
    )
    agent = Agent(
        model=ScriptedModel([f"Reply {i}: noted, and the plan is updated." for i in range(turns)]),
        conversation_manager=SlidingWindowConversationManager(window_size=40),
        session_manager=manager,
    )
    started = time.perf_counter()
    for i in range(turns):
        agent.state.set("progress", {"turn": i, "open_items": i % 7})
        await agent.invoke_async(f"Turn {i}: add item {i} to the plan.")
        if i % 100 == 99:
            await manager.save_snapshot(agent, is_latest=False)
    total = time.perf_counter() - started
    files, on_disk = _files_and_bytes(root)
    final_state = len(await manager.export("default"))
    return {
        "benchmark": "session_retention",
        "backend": "local",
        "turns": turns,
        "delete_folded_records": delete,
        "keep_snapshots": 3 if delete else None,
        "total_seconds": round(total, 3),
        "ms_per_turn": round(total / turns * 1000, 3),
        "files": files,
        "bytes_on_disk": on_disk,
        "final_state_bytes": final_state,
        "bytes_on_disk_over_final_state": round(on_disk / final_state, 2),
    }


def s3_storage() -> tuple[Storage, Any]:
    import boto3
    from moto.server import ThreadedMotoServer

    for key, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(key, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=url).create_bucket(Bucket="bench-sessions")
    return S3Storage("bench-sessions", endpoint_url=url), server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--backend", choices=["local", "s3", "all"], default="all")
    parser.add_argument("--retention", action="store_true", help="bytes on disk of a long session")
    args = parser.parse_args()
    if args.retention:
        turns = args.turns if args.turns != 300 else 10_000
        for delete in (True, False):
            with tempfile.TemporaryDirectory() as root:
                print(json.dumps(anyio.run(retention, Path(root), turns, delete)))
        return
    if args.backend in ("local", "all"):
        with tempfile.TemporaryDirectory() as root:
            print(json.dumps(anyio.run(run, LocalFileStorage(root), args.turns, "local")))
    if args.backend in ("s3", "all"):
        storage, server = s3_storage()
        try:
            print(json.dumps(anyio.run(run, storage, args.turns, "s3")))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
