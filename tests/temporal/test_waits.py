"""Durable waits on a real Temporal server (the dev server): a sleep is a workflow timer, an event is the
``send_event`` signal, taken once even when it is signalled twice with one key; nodes before the waits
run once (counted by a file outside the run)."""

from __future__ import annotations

import json
import secrets

import anyio
import pytest

from orchestra.multiagent import Status
from orchestra.spec import parse_text
from tests.server.wait_steps import calls

pytestmark = pytest.mark.timeout(300)

PIPELINE = """version: 1
kind: graph
id: order
nodes:
  - {id: before, function: 'tests.server.wait_steps:before'}
  - {id: nap, wait: {for: 1s}}
  - {id: middle, function: 'tests.server.wait_steps:middle'}
  - {id: pay, wait: {event: payment, timeout: 1d}}
  - {id: after, function: 'tests.server.wait_steps:after'}
edges:
  - {from: before, to: nap}
  - {from: nap, to: middle}
  - {from: middle, to: pay}
  - {from: pay, to: after}
"""


async def test_a_sleep_is_a_timer_and_an_event_a_signal_taken_once(temporal_address, tmp_path, monkeypatch):
    from orchestra import temporal as t

    counted = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(counted))
    loaded = parse_text(PIPELINE, "order.yaml")
    target = t.TemporalTarget(temporal_address, "default", "q-waits")
    client = await t.connect(target)
    request = t.RunRequest(
        spec_id="order",
        session_id="s1",
        storage=f"file:{tmp_path}/store",
        task="order 7",
        run_id=secrets.token_hex(4),
    )
    async with t.create_worker(client, "q-waits", [loaded]):
        handle = await t.start_run(client, target, request)
        for _ in range(600):  # the query is the only way to see a remote workflow's state
            progress = await handle.query(t.PipelineWorkflow.progress)
            if progress["interrupts"] and progress["interrupts"][0]["reason"].get("wait") == "event":
                break
            await anyio.sleep(0.1)
        assert calls(counted) == ["before", "middle"]  # the timer fired once; nothing ran twice
        event = {"name": "payment", "payload": {"amount": 42}, "key": "pay-7"}
        await handle.signal(t.PipelineWorkflow.send_event, event)
        await handle.signal(t.PipelineWorkflow.send_event, event)  # the same key again: not a second event
        summary = await handle.result()
        history = await handle.fetch_history()
    assert summary["status"] == Status.COMPLETED.value
    paid = json.dumps({"event": "payment", "payload": {"amount": 42}, "timed_out": False}, sort_keys=True)
    assert calls(counted) == ["before", "middle", f"after {paid}"]
    assert any(e.HasField("timer_started_event_attributes") for e in history.events)  # a workflow timer


def test_the_cli_on_temporal_says_the_run_waits_and_exits_5(temporal_address, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from orchestra.cli import app
    from tests.temporal.conftest import worker_process

    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(tmp_path / "calls"))  # the worker's nodes write there
    spec = tmp_path / "order.yaml"
    spec.write_text(PIPELINE.replace("{for: 1s}", "{for: 1h}"))
    worker = worker_process(temporal_address, "q-cli-waits", spec)
    try:
        on = f"temporal://{temporal_address}/default?task_queue=q-cli-waits"
        result = CliRunner().invoke(
            app,
            [
                "run",
                str(spec),
                "--on",
                on,
                "--session-id",
                "w1",
                "--storage",
                f"file:{tmp_path}/store",
                "--input",
                "o",
            ],
        )
        assert result.exit_code == 5, result.output
        assert "waiting" in result.stderr
        assert "a timer until" in result.stderr
        assert calls(tmp_path / "calls") == ["before"]
    finally:
        worker.terminate()
        worker.wait(30)
        worker.stderr.close()
