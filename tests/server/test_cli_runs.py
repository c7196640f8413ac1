"""``orchestra runs list/show/cancel/stream --url`` against a real server."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import time

import httpx
import pytest
from typer.testing import CliRunner

from orchestra import Agent, ScriptedModel
from orchestra.cli import app
from orchestra.client import Client, NotFoundError
from orchestra.session import SnapshotSessionManager
from orchestra.storage import storage_from_uri
from tests.server.conftest import KEYS, Server, auth, write_config

runner = CliRunner()


def cli(server, *args: str):
    return runner.invoke(app, ["runs", *args, "--url", server.url, "--api-key", KEYS["acme"]])


def test_list_show_and_stream_a_run(platform):
    run_id = httpx.post(
        f"{platform.url}/api/v1/agents/steps/runs",
        json={"input": "go", "session_id": "cli"},
        headers=auth(),
        timeout=30,
    ).json()["run_id"]
    streamed = cli(platform, "stream", run_id, "--json")
    assert streamed.exit_code == 0, streamed.output
    events = [json.loads(line) for line in streamed.output.splitlines()]
    assert [int(e["id"]) for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == "result"
    later = cli(platform, "stream", run_id, "--json", "--from", "40")
    assert [json.loads(line) for line in later.output.splitlines()] == events[40:]

    listed = cli(platform, "list", "--agent", "steps", "--json")
    assert [r["run_id"] for r in json.loads(listed.output)] == [run_id]
    table = cli(platform, "list")
    assert run_id[:8] in table.output
    shown = cli(platform, "show", run_id)
    assert shown.exit_code == 0
    assert "status: completed" in shown.output


def test_show_exits_3_for_a_run_waiting_for_a_human(platform):
    run = httpx.post(
        f"{platform.url}/api/v1/agents/payer/invoke",
        json={"input": "pay", "session_id": "h"},
        headers=auth(),
        timeout=30,
    ).json()
    shown = cli(platform, "show", run["run_id"])
    assert shown.exit_code == 3
    assert f"waiting: {run['interrupts'][0]['id']} approval (tool approve_payment)" in shown.output

    # Answered (issue 35 item 5): the run that asked waits no more, and says which run went on.
    answer = {"interrupt_id": run["interrupts"][0]["id"], "response": "yes"}
    answered = httpx.post(
        f"{platform.url}/api/v1/agents/payer/invoke",
        json={"responses": [answer], "session_id": "h"},
        headers=auth(),
        timeout=30,
    ).json()
    shown = cli(platform, "show", run["run_id"])
    assert shown.exit_code == 0, shown.output
    assert "status: answered" in shown.output
    assert "waiting:" not in shown.output
    listed = json.loads(cli(platform, "list", "--session", "h", "--json").output)
    assert {r["run_id"]: (r["status"], r["resumed_by"]) for r in listed} == {
        run["run_id"]: ("answered", answered["run_id"]),
        answered["run_id"]: ("completed", None),
    }


def test_cancel_waits_for_the_run_to_stop(platform, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "5")
    run_id = httpx.post(
        f"{platform.url}/api/v1/agents/slow/runs",
        json={"input": "x", "session_id": "cc"},
        headers=auth(),
        timeout=30,
    ).json()["run_id"]
    deadline = time.monotonic() + 20
    while (
        httpx.get(f"{platform.url}/api/v1/runs/{run_id}", headers=auth(), timeout=30).json()["status"]
        != "executing"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    cancelled = cli(platform, "cancel", run_id, "--wait")
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.output.strip() == f"{run_id}: interrupted"
    again = cli(platform, "cancel", run_id)
    assert again.exit_code == 1
    assert "409 run_finished" in again.output


def test_an_unknown_run_or_a_bad_key_is_one_line(platform):
    missing = cli(platform, "show", "nope")
    assert missing.exit_code == 1
    assert "404 unknown_run" in missing.output
    refused = runner.invoke(app, ["runs", "list", "--url", platform.url, "--api-key", "wrong"])
    assert refused.exit_code == 1
    assert "401 unauthorized" in refused.output


# -- what a newcomer reads in runs list and runs show (issue 35, item 25) ------------------------------

GATED = """version: 1
kind: graph
id: gated
nodes:
  - {id: one, function: 'tests.server.agents:wait_step'}
  - {id: two, function: 'tests.server.agents:gate_step'}
  - {id: three, function: 'tests.server.agents:wait_step'}
edges:
  - {from: one, to: two}
  - {from: two, to: three}
"""

LONG_SESSION = "customer-2026-11-30-support-thread-with-a-rather-long-id-0042"


@pytest.fixture
def gated(tmp_path, monkeypatch):
    """A server hosting ``gated``: its node ``two`` runs until the test creates the gate file."""
    monkeypatch.setenv("ORCHESTRA_TEST_GATE", str(tmp_path / "gate"))
    monkeypatch.setenv("ORCHESTRA_TEST_STEP", "0")
    config = write_config(tmp_path, f"file:{tmp_path}/store")
    (tmp_path / "gated.yaml").write_text(GATED)
    text = config.read_text().replace(
        "agents:\n", "agents:\n  - {id: gated, spec: gated.yaml, workspace: acme}\n", 1
    )
    config.write_text(text)
    with Server(config) as running:
        yield running, tmp_path / "gate"


def until(what, check):
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"waited 30 s for {what}"
        time.sleep(0.02)


def saved_nodes(client: Client, session_id: str) -> dict[str, str]:
    try:
        return (client.session("gated", session_id).get("run") or {}).get("nodes") or {}
    except NotFoundError:  # nothing saved yet
        return {}


def test_runs_show_gives_a_running_pipeline_s_nodes_and_a_stop_in_words(gated):
    server, _ = gated
    with Client(server.url, KEYS["acme"]) as client:
        run = client.start_run("gated", "go", session_id="g1")
        until("node one to be saved", lambda: saved_nodes(client, "g1").get("one") == "completed")
        running = cli(server, "show", run.run_id)
        assert running.exit_code == 0, running.output
        assert "status: executing\n" in running.output
        assert "nodes (as its session has saved them so far):\n  one: completed\n  two: pending\n" in (
            running.output
        )
        client.cancel(run.run_id)
        client.wait(run.run_id, timeout=60)
    stopped = cli(server, "show", run.run_id)
    assert "stopped: cancelled\n" in stopped.output  # words, not {'by': 'cancel', ...}
    assert "{" not in stopped.output
    assert "nodes:\n  one: completed\n" in stopped.output


def test_runs_show_lists_a_finished_pipeline_s_nodes(gated):
    server, gate = gated
    gate.touch()
    with Client(server.url, KEYS["acme"]) as client:
        done = client.invoke("gated", "go", session_id="g2")
    shown = cli(server, "show", done.run_id)
    assert "status: completed\n" in shown.output
    assert "nodes:\n  one: completed\n  two: completed\n  three: completed\n" in shown.output


def in_a_terminal(args: list[str], columns: int) -> str:
    """The output of ``orchestra ARGS`` run in a pseudo-terminal ``columns`` wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-c", "from orchestra.cli import main; main()", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert process.wait(60) == 0, b"".join(chunks).decode()
    return b"".join(chunks).decode()


def piped(args: list[str], columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", "from orchestra.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize("output", [piped, in_a_terminal])
def test_tables_never_cut_ids_at_any_width_or_when_piped(platform, tmp_path, output):
    with Client(platform.url, KEYS["acme"]) as client:
        run = client.invoke("chat", "hi", session_id=LONG_SESSION)
    for columns in (40, 80):
        listed = output(["runs", "list", "--url", platform.url, "--api-key", KEYS["acme"]], columns)
        assert run.run_id in listed
        assert LONG_SESSION in listed
        assert "…" not in listed
    storage = f"file:{tmp_path}/sessions"
    Agent(
        model=ScriptedModel(["x"]),
        session_manager=SnapshotSessionManager(LONG_SESSION, storage=storage_from_uri(storage)),
    )("hi")
    sessions = output(["sessions", "list", "--storage", storage], 40)
    assert LONG_SESSION in sessions
    assert "agent/default" in sessions
    if output is piped:  # one line per row, for grep and awk
        assert any(LONG_SESSION in line and "agent/default" in line for line in sessions.splitlines())
