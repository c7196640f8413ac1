"""``orchestra runs list/show/cancel/stream --url`` against a real server."""

from __future__ import annotations

import json
import time

import httpx
from typer.testing import CliRunner

from orchestra.cli import app
from tests.server.conftest import KEYS, auth

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
