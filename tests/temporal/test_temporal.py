"""Pipelines on a real Temporal server: the same results as locally, resume, interrupts as signals, the CLI."""

import json
import secrets
from pathlib import Path

import pytest

from orchestra import load
from orchestra.multiagent import Status
from orchestra.session.admin import load_scope
from orchestra.spec import parse_file, parse_text
from orchestra.storage import storage_from_uri
from tests.cli.pipelines import FAILING, HUMAN
from tests.temporal.conftest import workers

EXAMPLES = Path(__file__).parent.parent.parent / "examples" / "graphs"
pytestmark = pytest.mark.timeout(300)


def temporal():
    from orchestra import temporal as module

    return module


async def run_on(address, queue, loaded, storage, session, task, **options):
    t = temporal()
    target = t.TemporalTarget(address, "default", queue)
    client = await t.connect(target)
    request = t.RunRequest(
        spec_id=loaded.spec.id,
        session_id=session,
        storage=storage,
        task=task,
        run_id=secrets.token_hex(4),
        **options,
    )
    async with t.create_worker(client, queue, [loaded]):
        handle = await t.start_run(client, target, request)
        return await handle.result(), client


@pytest.mark.parametrize("name", ["review_loop", "fan_out", "support_swarm", "nested"])
async def test_examples_give_the_same_results_as_locally(name, temporal_address, tmp_path):
    loaded = parse_file(EXAMPLES / f"{name}.yaml")
    storage = f"file:{tmp_path}/store"
    summary, _ = await run_on(temporal_address, f"q-{name}", loaded, storage, "s1", loaded.spec.input)
    local = load(EXAMPLES / f"{name}.yaml")
    expected = await local.invoke_async(loaded.spec.input)
    assert summary["status"] == "completed"
    assert sorted(summary["execution_order"]) == sorted(expected.execution_order)
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", loaded.spec.id)
    outputs = {
        n[len("node/") :]: r["result"]["output"]
        for n, r in doc.fields.items()
        if n.startswith("node/") and r.get("result")
    }
    assert outputs == {n: r.output for n, r in expected.results.items()}
    assert temporal().stored_output  # the CLI prints the same final output
    final = await temporal().stored_output(storage, "s1", loaded.spec.id)
    assert final == expected.output


async def test_a_failed_run_resumes_on_temporal_without_rerunning_completed_nodes(
    temporal_address, tmp_path, monkeypatch
):
    loaded = parse_text(FAILING, "failing.yaml")
    storage = f"file:{tmp_path}/store"
    monkeypatch.delenv("ORCHESTRA_TEST_ALLOW", raising=False)
    first, _ = await run_on(temporal_address, "q-fail", loaded, storage, "s1", "go")
    assert first["status"] == "failed"
    assert "not allowed yet" in first["reason"]
    monkeypatch.setenv("ORCHESTRA_TEST_ALLOW", "1")
    second, _ = await run_on(temporal_address, "q-fail", loaded, storage, "s1", None, resume=True)
    assert second["status"] == "completed"
    assert second["execution_order"] == [
        "first",
        "gate",
        "gate",
    ]  # first ran once; gate failed, then ran again


async def test_an_interrupt_waits_for_a_signal(temporal_address, tmp_path):
    t = temporal()
    loaded = parse_text(HUMAN, "human.yaml")
    target = t.TemporalTarget(temporal_address, "default", "q-human")
    client = await t.connect(target)
    request = t.RunRequest(
        spec_id=loaded.spec.id, session_id="s1", storage=f"file:{tmp_path}/store", task="go", run_id="r1"
    )
    async with t.create_worker(client, "q-human", [loaded]):
        handle = await t.start_run(client, target, request)
        import anyio

        for _ in range(100):
            progress = await handle.query(t.PipelineWorkflow.progress)
            if progress["status"] == "interrupted":
                break
            await anyio.sleep(0.1)
        assert progress["interrupts"][0]["name"] == "approve"
        assert (await t.running_handle(client, "human", "s1")) is not None
        await handle.signal(t.PipelineWorkflow.respond, {progress["interrupts"][0]["id"]: "yes"})
        summary = await handle.result()
    assert summary["status"] == Status.COMPLETED.value
    assert await t.stored_output(f"file:{tmp_path}/store", "s1", "human") == "human said yes"


def test_the_cli_runs_and_follows_a_pipeline_on_temporal(temporal_address, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from orchestra.cli import app

    monkeypatch.setattr("orchestra.cli._temporal.live_display", lambda: True)  # the table, as on a terminal

    with workers(temporal_address, "q-cli", EXAMPLES / "review_loop.yaml"):
        on = f"temporal://{temporal_address}/default?task_queue=q-cli"
        storage = f"file:{tmp_path}/store"
        spec = str(EXAMPLES / "review_loop.yaml")

        def on_temporal(command: str, session: str, *extra: str):
            return CliRunner().invoke(
                app, [command, spec, "--on", on, "--session-id", session, "--storage", storage, *extra]
            )

        result = on_temporal("run", "c1", "--json")
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["status"] == "completed"
        assert data["output"] == "APPROVED"
        local = CliRunner().invoke(app, ["run", spec, "--session-id", "l1", "--storage", storage, "--json"])
        expected = json.loads(local.stdout)
        assert set(data) == set(expected)  # --json has the same shape on Temporal as locally
        for key in ("status", "output", "execution_order", "execution_count", "interrupts"):
            assert data[key] == expected[key], key
        assert data["results"].keys() == expected["results"].keys()
        followed = on_temporal("run", "c2")
        assert followed.exit_code == 0, followed.output
        table = [line for line in followed.stderr.splitlines() if "review" in line and "completed" in line]
        assert table, followed.stderr
        assert "APPROVED" in table[-1], followed.stderr  # the live table shows outputs
        assert " 0.00 " not in table[-1], table[-1]  # and seconds (the reviewer takes 0.4 s a turn)
        shown = CliRunner().invoke(app, ["sessions", "show", "c1", "--storage", storage])
        assert "status: completed" in shown.stdout  # Temporal runs are in the session like local ones
        again = on_temporal("resume", "c1")
        assert again.exit_code == 1
        assert "the run of session c1 already completed: nothing to resume" in again.stderr
        assert "orchestra result" in again.stderr


async def test_structured_output_routes_the_same_on_temporal(temporal_address, tmp_path):
    """A node's structured output crosses the activity boundary as JSON: field conditions route the run
    as locally, and the stored output is the object."""
    loaded = parse_file(EXAMPLES / "invoice_triage.yaml")
    storage = f"file:{tmp_path}/store"
    summary, _ = await run_on(temporal_address, "q-invoice", loaded, storage, "s1", loaded.spec.input)
    assert summary["status"] == "completed"
    assert summary["execution_order"] == ["extract", "approve"]
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", loaded.spec.id)
    stored = doc.fields["node/extract"]["result"]["output"]
    assert stored == {"customer": "ACME", "total": 2150.0, "overdue": True}
