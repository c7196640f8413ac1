"""Server throughput and latency: 32 concurrent clients invoking an agent over HTTP.

For each of session mode and no-memory mode, on one and on two worker processes (local file storage),
prints one JSON object: requests/s and p50/p99 latency in milliseconds. The agent's model is the
offline stand-in (``model: scripted``), so the figures measure the server, sessions and storage.

    python benchmarks/bench_server.py [--requests 1000] [--clients 32]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

KEY = "bench-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(root: Path) -> Path:
    (root / "agent.yaml").write_text(
        "version: 1\nkind: agent\nid: bench\nagents:\n  - name: bench\n    model: scripted\n"
        "    conversation_manager: {type: sliding_window, window_size: 40}\n"
    )
    config = root / "server.yaml"
    config.write_text(
        f"version: 1\nstorage: file:{root}/store\n"
        "agents:\n  - {id: bench, spec: agent.yaml, workspace: ws}\n"
        f"api_keys:\n  - {{workspace: ws, sha256: {hashlib.sha256(KEY.encode()).hexdigest()}}}\n"
    )
    return config


def start(config: Path, port: int, workers: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from orchestra.cli import main; main()",
            "serve",
            str(config),
            "--port",
            str(port),
            "--workers",
            str(workers),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not start")


async def load(url: str, mode: str, requests: int, clients: int) -> dict[str, Any]:
    latencies: list[float] = []
    conflicts = 0
    per_client = requests // clients

    async def client(index: int, http: httpx.AsyncClient) -> None:
        nonlocal conflicts
        for turn in range(per_client):
            body: dict[str, Any] = {"input": f"client {index} turn {turn}"}
            if mode == "session":
                body["session_id"] = f"bench-{index}"
            started = time.perf_counter()
            while True:
                reply = await http.post(f"{url}/api/v1/agents/bench/invoke", json=body)
                if reply.status_code != 409:
                    break
                conflicts += 1
            reply.raise_for_status()
            latencies.append(time.perf_counter() - started)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {KEY}"}, timeout=60, limits=limits
    ) as http:
        for warmup in range(4):
            await http.post(f"{url}/api/v1/agents/bench/invoke", json={"input": f"warm up {warmup}"})
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for index in range(clients):
                group.start_soon(client, index, http)
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(latencies),
        "seconds": round(elapsed, 3),
        "requests_per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
        "conflicts_retried": conflicts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    for workers in (1, 2):
        for mode in ("session", "none"):
            with tempfile.TemporaryDirectory() as root:
                config = write_config(Path(root))
                port = free_port()
                server = start(config, port, workers)
                try:
                    figures = anyio.run(load, f"http://127.0.0.1:{port}", mode, args.requests, args.clients)
                finally:
                    server.terminate()
                    server.wait(30)
            print(
                json.dumps(
                    {
                        "benchmark": "server_invoke",
                        "workers": workers,
                        "mode": mode,
                        "clients": args.clients,
                        **figures,
                    }
                )
            )


if __name__ == "__main__":
    main()
