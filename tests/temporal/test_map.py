"""Fan-out (map nodes) and retry policies on a real Temporal server: items and attempts run as
activities, with the same results as locally."""

import secrets
from collections import Counter

import pytest

from orchestra import load
from orchestra.session.admin import load_scope
from orchestra.spec import parse_text
from orchestra.storage import storage_from_uri

pytestmark = pytest.mark.timeout(300)

MAP_SPEC = """
version: 1
kind: graph
id: fan
nodes:
  - {id: split, function: 'tests.orchestration_steps:split'}
  - id: each
    map: {node: 'tests.orchestration_steps:slow_item', max_concurrency: 4}
  - {id: total, function: 'tests.orchestration_steps:total'}
edges:
  - {from: split, to: each}
  - {from: each, to: total}
"""

RETRY_SPEC = """
version: 1
kind: graph
id: retried
nodes:
  - id: flaky
    function: 'tests.orchestration_steps:flaky'
    retry: {max_attempts: 3, initial_interval: 0.05, retry_on: [any]}
  - {id: wrong, function: 'tests.orchestration_steps:misconfigured', retry: {max_attempts: 3, retry_on: [any]}}
edges:
  - {from: flaky, to: wrong}
"""


async def run_on(address, queue, loaded, storage, session, task):
    from orchestra import temporal

    target = temporal.TemporalTarget(address, "default", queue)
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id=loaded.spec.id, session_id=session, storage=storage, task=task, run_id=secrets.token_hex(4)
    )
    async with temporal.create_worker(client, queue, [loaded]):
        handle = await temporal.start_run(client, target, request)
        return await handle.result()


async def test_a_map_runs_its_items_as_activities_with_the_local_result(
    temporal_address, tmp_path, monkeypatch
):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.01")
    (tmp_path / "fan.yaml").write_text(MAP_SPEC)
    loaded = parse_text(MAP_SPEC, "fan.yaml")
    storage = f"file:{tmp_path}/store"
    summary = await run_on(temporal_address, "q-map", loaded, storage, "s1", "go")
    assert summary["status"] == "completed", summary
    local = await load(tmp_path / "fan.yaml").invoke_async("go")
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "fan")
    assert (
        doc.fields["node/each"]["result"]["output"]
        == local.results["each"].output
        == [2 * i for i in range(12)]
    )
    assert doc.fields["node/total"]["result"]["output"] == local.output == 132
    assert not [
        name for name in doc.fields if name.startswith("map/")
    ]  # the items' progress went with the map
    runs = Counter(calls.read_text().split())
    assert all(runs[f"each[{i}]"] == 2 for i in range(12))  # once on Temporal, once locally


async def test_retry_policies_become_activity_retries(temporal_address, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_FAILS", "2")
    loaded = parse_text(RETRY_SPEC, "retried.yaml")
    storage = f"file:{tmp_path}/store"
    summary = await run_on(temporal_address, "q-retry", loaded, storage, "s1", "go")
    assert summary["status"] == "failed"
    assert "ConfigurationError" in summary["reason"]
    runs = calls.read_text().split()
    # flaky: two failed attempts, retried by Temporal, then one that completed; a configuration error
    # is never retried, whatever retry_on says.
    assert runs == ["flaky:1", "flaky:2", "flaky:3", "wrong:1"]
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "retried")
    record = doc.fields["node/flaky"]
    assert record["status"] == "completed"
    assert [a["attempt"] for a in record["attempts"]] == [1, 2]
    assert record["attempts"][0]["error"] == "RuntimeError: flaky failed on attempt 1"
