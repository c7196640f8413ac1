"""Session persistence cost as a conversation grows: 300 turns, saving after every message.

One agent with a ``NullConversationManager`` (the history grows to 600 messages) and
``save_latest_on="message"``, on ``LocalFileStorage`` and on S3 (moto's server on 127.0.0.1). Prints one
JSON object per backend: total seconds, the last-50 / first-50 turn time ratio (target <= 1.3), bytes
written and their ratio to the size of the final exported snapshot (target <= 3x on local files).

    python benchmarks/bench_sessions.py [--turns 300] [--backend local|s3|all]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import anyio

from orchestra import Agent
from orchestra.conversation import NullConversationManager
from orchestra.session import SnapshotSessionManager
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
    args = parser.parse_args()
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
