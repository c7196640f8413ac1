"""The access log of ``orchestra serve`` (a real process): a line per request with its method, route
template, status, duration, request id and run id; JSON under ``--log-format json``; never a body, a key
or a token; ``--access-log off`` writes none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.server.conftest import KEYS, auth, write_config
from tests.server.test_concurrency import free_port

ROOT = Path(__file__).parent.parent.parent
SECRET_INPUT = "my-card-number-4111"


def serve(
    config: Path, log: Path, *options: str, serve_options: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    """``orchestra [options] serve config [serve_options]`` on a free port, its stderr to ``log``."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    command = [sys.executable, "-c", "from orchestra.cli import main; main()", *options]  # global options
    with log.open("wb") as sink:  # the process has its own copy of the file
        process = subprocess.Popen(
            [*command, "serve", str(config), "--port", str(port), *serve_options],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/api/v1/agents", timeout=1)
            return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(30)


def requests(url: str) -> dict[str, str]:
    """A turn (with a key), a repeat of it, a 404 and a refused key; what the client saw of them."""
    seen: dict[str, str] = {}
    body = {"input": SECRET_INPUT, "session_id": "s1"}
    headers = {**auth(), "Idempotency-Key": "key-1"}
    first = httpx.post(f"{url}/api/v1/agents/chat/invoke", json=body, headers=headers, timeout=30)
    assert first.status_code == 200, first.text
    seen["run_id"] = first.json()["run_id"]
    seen["request_id"] = first.headers["x-request-id"]
    again = httpx.post(f"{url}/api/v1/agents/chat/invoke", json=body, headers=headers, timeout=30)
    assert again.headers.get("idempotent-replayed") == "true"
    seen["replay_request_id"] = again.headers["x-request-id"]
    run = httpx.get(f"{url}/api/v1/runs/{seen['run_id']}", headers=auth(), timeout=30)
    assert run.status_code == 200
    assert httpx.get(f"{url}/api/v1/runs/nope", headers=auth(), timeout=30).status_code == 404
    refused = httpx.get(f"{url}/api/v1/agents", headers={"Authorization": "Bearer wrong"}, timeout=30)
    assert refused.status_code == 401
    return seen


def test_a_json_line_per_request_with_route_status_and_ids_and_no_secret(tmp_path):
    config = write_config(tmp_path, f"file:{tmp_path}/store")
    log = tmp_path / "stderr.log"
    process, url = serve(config, log, "--log-format", "json")
    try:
        seen = requests(url)
    finally:
        stop(process)
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    access = [line for line in lines if line.get("event") == "request"]
    invokes = [line for line in access if line["route"] == "/api/v1/agents/{agent_id}/invoke"]
    assert [(i["method"], i["status"], i["request_id"], i["run_id"]) for i in invokes] == [
        ("POST", 200, seen["request_id"], seen["run_id"]),
        ("POST", 200, seen["replay_request_id"], seen["run_id"]),  # the repeat names the first run
    ]
    assert all(isinstance(i["duration_ms"], float | int) and i["duration_ms"] >= 0 for i in invokes)
    reads = [
        (i["route"], i["status"], i.get("run_id")) for i in access if i["route"].startswith("/api/v1/runs")
    ]
    assert reads == [
        ("/api/v1/runs/{run_id}", 200, seen["run_id"]),
        ("/api/v1/runs/{run_id}", 404, "nope"),
    ]
    assert ("GET", "/api/v1/agents", 401) in {(i["method"], i["route"], i["status"]) for i in access}
    for secret in (SECRET_INPUT, KEYS["acme"], "wrong", "key-1"):
        assert secret not in text


def test_console_lines_by_default_and_none_with_access_log_off(tmp_path):
    config = write_config(tmp_path, f"file:{tmp_path}/store")
    log = tmp_path / "console.log"
    process, url = serve(config, log)
    try:
        seen = requests(url)
    finally:
        stop(process)
    lines = [line for line in log.read_text().splitlines() if "/api/v1/agents/{agent_id}/invoke" in line]
    assert len(lines) == 2
    assert all(seen["run_id"] in line and "status=200" in line for line in lines)

    quiet = tmp_path / "quiet.log"
    process, url = serve(config, quiet, serve_options=("--access-log", "off"))
    try:
        requests(url)
    finally:
        stop(process)
    assert "/api/v1/" not in quiet.read_text()
