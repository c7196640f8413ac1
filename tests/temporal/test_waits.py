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
    from tests.temporal.conftest import workers

    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(tmp_path / "calls"))  # the worker's nodes write there
    spec = tmp_path / "order.yaml"
    spec.write_text(PIPELINE.replace("{for: 1s}", "{for: 1h}"))
    with workers(temporal_address, "q-cli-waits", spec):
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


async def test_an_event_sent_before_its_wait_survives_a_continue_as_new(
    temporal_address, tmp_path, monkeypatch
):
    """Issue 39 item 1 with issue 37 item 2: an event signalled while the run still works through a long
    chain (before its wait began) goes with the run when it continues as new, and the wait takes it."""
    from orchestra import temporal as t

    counted = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(counted))
    chain = "".join(f"  - {{id: n{i}, function: 'tests.orchestration_steps:mark'}}\n" for i in range(40))
    links = "".join(f"  - {{from: n{i}, to: n{i + 1}}}\n" for i in range(39))
    text = (
        "version: 1\nkind: graph\nid: late\nnodes:\n"
        + chain
        + "  - {id: pay, wait: {event: payment, timeout: 20s}}\n"
        + "  - {id: after, function: 'tests.server.wait_steps:after'}\n"
        + "edges:\n"
        + links
        + "  - {from: n39, to: pay}\n  - {from: pay, to: after}\n"
    )
    loaded = parse_text(text, "late.yaml")
    target = t.TemporalTarget(temporal_address, "default", "q-waits-can")
    client = await t.connect(target)
    request = t.RunRequest(
        spec_id="late",
        session_id="s1",
        storage=f"file:{tmp_path}/store",
        task="order 8",
        run_id=secrets.token_hex(4),
        max_history_events=60,
    )
    async with t.create_worker(client, "q-waits-can", [loaded]):
        handle = await t.start_run(client, target, request)
        event = {"name": "payment", "payload": {"amount": 8}, "key": "pay-8"}
        await handle.signal(t.PipelineWorkflow.send_event, event)
        summary = await handle.result()
        described = await client.get_workflow_handle(handle.id).describe()
    assert summary["status"] == Status.COMPLETED.value
    assert described.run_id != handle.first_execution_run_id  # it did continue as new after the signal
    paid = json.dumps({"event": "payment", "payload": {"amount": 8}, "timed_out": False}, sort_keys=True)
    assert calls(counted)[-1] == f"after {paid}"
