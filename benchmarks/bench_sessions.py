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

    python benchmarks/bench_sessions.py [--turns 300] [--backend local|s3|sqlite|postgres|all]
    python benchmarks/bench_sessions.py --retention [--turns 10000]
    python benchmarks/bench_sessions.py --long     # an agent's per-call save over 10,000 messages, RSS
    python benchmarks/bench_sessions.py --scale    # a 100,000-message session's load next to 10,000

The 300-turn run also measures its floor in the same run: as many fdatasync'd appends of the same size
to one file as orchestra made writes, and prints the ratio. On SQLite and PostgreSQL (``--backend sqlite``,
``--backend postgres`` with ORCHESTRA_BENCH_POSTGRES set) it also measures the database's own floor: as
many one-row transactions, committed durably by the driver alone; and then 50 sessions talking at once
(10 turns each): how many group commits their 500 saves took, against 500 driver commits.
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
from _databases import KINDS, commit_floor, database
from _measure import fsynced_appends, growth, in_fresh_process

from orchestra import Agent
from orchestra.conversation import NullConversationManager, SlidingWindowConversationManager
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session._journal import Document, Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import LocalFileStorage, S3Storage, Storage
from orchestra.storage.memory import InMemoryStorage
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
    floor = (
        fsynced_appends(counting.writes, counting.bytes_written // counting.writes)
        if backend in ("local", *KINDS)
        else None
    )
    database: dict[str, Any] = {}
    if backend in KINDS:  # the database's own floor: as many one-row commits, by the driver alone
        commits = commit_floor(backend, counting.writes, counting.bytes_written // counting.writes)
        database = {
            "floor_seconds_driver_commits": round(commits, 3),
            "total_over_driver_commits": round(total / commits, 2),
            "group_commits": storage.group.commits,  # type: ignore[attr-defined]
        }
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
        "floor_seconds_fsynced_appends": round(floor, 3) if floor is not None else None,
        "total_over_floor": round(total / floor, 2) if floor else None,
        "target_total_over_floor": 2 if floor else None,
        **database,
    }


async def concurrent_sessions(storage: Any, kind: str, sessions: int = 50, turns: int = 10) -> dict[str, Any]:
    """``sessions`` agents, each in its own session, talking at once (a server's turns): how many group
    commits their saves took, against as many durable one-row commits made by the driver alone."""
    agents = [
        await Agent.create(
            model=ScriptedModel([f"r{t}" for t in range(turns)]),
            session_manager=SnapshotSessionManager(f"c{i}", storage=storage),
        )
        for i in range(sessions)
    ]
    commits, changes = storage.group.commits, storage.group.changes

    async def talk(agent: Agent) -> None:
        for turn in range(turns):
            await agent.invoke_async(f"turn {turn}")

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for agent in agents:
            group.start_soon(talk, agent)
    total = time.perf_counter() - started
    made = storage.group.changes - changes
    floor = commit_floor(kind, made, 300)
    return {
        "benchmark": "concurrent_sessions",
        "backend": kind,
        "sessions": sessions,
        "turns_each": turns,
        "total_seconds": round(total, 3),
        "writes": made,
        "group_commits": storage.group.commits - commits,
        "floor_seconds_driver_commits_one_per_write": round(floor, 3),
        "total_over_that_floor": round(total / floor, 3),
    }


async def long_session(turns: int, in_memory: bool = False) -> dict[str, Any]:
    """An agent with a session on local files (or in memory: the save's own work without the disk's),
    saving after every message, for ``turns`` turns (twice as many messages): the mean call of the first
    and the last 100 turns (target: ratio <= 1.2)."""
    with tempfile.TemporaryDirectory() as root:
        storage = InMemoryStorage() if in_memory else LocalFileStorage(root)
        manager = SnapshotSessionManager("long", storage=storage, save_latest_on="message")
        agent = Agent(
            model=ScriptedModel([f"r{i}" for i in range(turns)]),
            conversation_manager=NullConversationManager(),
            session_manager=manager,
        )
        durations = []
        for i in range(turns):
            started = time.perf_counter()
            await agent.invoke_async(f"u{i}")
            durations.append(time.perf_counter() - started)
    first, last = sum(durations[:100]) / 100, sum(durations[-100:]) / 100
    return {
        "case": "agent_session_long",
        "storage": "memory" if in_memory else "local",
        "messages": len(agent.messages),
        "first_100_mean_us": round(first * 1e6, 1),
        "last_100_mean_us": round(last * 1e6, 1),
        "last_100_over_first_100": round(last / first, 3),
        "target_ratio": 1.2,
    }


async def long_session_in_memory(turns: int) -> dict[str, Any]:
    return await long_session(turns, in_memory=True)


async def session_load(messages: int) -> dict[str, Any]:
    """Load a saved session of ``messages`` short messages (made by ``make_session``) into an agent."""
    root = os.environ["BENCH_SESSION_ROOT"]
    started = time.perf_counter()
    agent = Agent(
        model=ScriptedModel([]),
        conversation_manager=NullConversationManager(),
        session_manager=SnapshotSessionManager(f"m{messages}", storage=LocalFileStorage(root)),
    )
    seconds = time.perf_counter() - started
    assert len(agent.messages) == messages, len(agent.messages)
    return {"case": "session_load", "messages": messages, "seconds": round(seconds, 4)}


async def make_session(root: str, messages: int) -> None:
    """A saved session of ``messages`` short messages, written as one journal record (fast to make)."""
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": f"message {i}"}]}
        for i in range(messages)
    ]
    journal = Journal(LocalFileStorage(root), ScopeLayout(f"m{messages}", "agent", "default"))
    await journal.create(Document(fields={"state": {}, "system_prompt": None}, logs={"messages": history}))


def scale() -> None:
    """A 100,000-message session's load (time, RSS) next to a 10,000-message one, each in a fresh process."""
    with tempfile.TemporaryDirectory() as root:
        for size in (10_000, 100_000):
            anyio.run(make_session, root, size)
        os.environ["BENCH_SESSION_ROOT"] = root
        small = in_fresh_process(__file__, "session_load", 10_000)
        large = in_fresh_process(__file__, "session_load", 100_000)
    print(
        json.dumps(
            {
                "benchmark": "session_scale",
                "small": small,
                "large": large,
                "time_growth_per_size": growth(small, large, "messages", "seconds"),
                "memory_growth_per_size": growth(
                    small, large, "messages", "rss_over_imports_mb", min_base=1.0
                ),
            }
        )
    )


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
    parser.add_argument(
        "--backend",
        choices=["local", "s3", "sqlite", "postgres", "all"],
        default="all",
        help="all: local and s3 (the database ones need their own run)",
    )
    parser.add_argument("--retention", action="store_true", help="bytes on disk of a long session")
    parser.add_argument("--long", action="store_true", help="an agent's save cost over 10,000 messages")
    parser.add_argument("--scale", action="store_true", help="loading a 100,000-message session")
    args = parser.parse_args()
    if args.long:
        for case in ("long_session", "long_session_in_memory"):
            print(json.dumps(in_fresh_process(__file__, case, 5000)))
        return
    if args.scale:
        scale()
        return
    if args.retention:
        turns = args.turns if args.turns != 300 else 10_000
        for delete in (True, False):
            with tempfile.TemporaryDirectory() as root:
                print(json.dumps(anyio.run(retention, Path(root), turns, delete)))
        return
    if args.backend in ("local", "all"):
        with tempfile.TemporaryDirectory() as root:
            print(json.dumps(anyio.run(run, LocalFileStorage(root), args.turns, "local")))
    if args.backend in KINDS:
        with database(args.backend) as (storage, _):
            print(json.dumps(anyio.run(run, storage, args.turns, args.backend)))
        with database(args.backend) as (storage, _):
            print(json.dumps(anyio.run(concurrent_sessions, storage, args.backend)))
    if args.backend in ("s3", "all"):
        storage, server = s3_storage()
        try:
            print(json.dumps(anyio.run(run, storage, args.turns, "s3")))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
