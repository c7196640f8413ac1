"""Long runs continue as new (issue 39 item 1): with a small threshold a long chain, a long handoff swarm and
a large map hand their run to new workflow runs of the same id. Each run's history stays under the
threshold (read through the client), the result is the local run's, every node ran once, and each
history replays with temporalio's ``Replayer``.

CI runs small counts (an 80-node chain, a loop of 60 node runs, 100 handoffs, a 150-item map);
``ORCHESTRA_STRESS=1`` runs the issue's 20,000 node runs (a loop: a YAML file holds at most 100,000
values, so a chain of distinct nodes stops near 3,000; it runs 2,000) and 5,000 handoffs."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections import Counter
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.worker import Replayer

from orchestra import load
from orchestra.session.admin import load_scope
from orchestra.spec import parse_text
from orchestra.storage import storage_from_uri
from orchestra.temporal import CommitRequest, PipelineActivities

pytestmark = pytest.mark.timeout(3600 if os.environ.get("ORCHESTRA_STRESS") else 300)

STRESS = bool(os.environ.get("ORCHESTRA_STRESS"))
NODES = 2_000 if STRESS else 80
LAPS = 10_000 if STRESS else 30  # two nodes a lap
HANDOFFS = 5_000 if STRESS else 100
ITEMS = 2_000 if STRESS else 150
EVENTS = 200  # the threshold: a few dozen nodes per workflow run
# What may come after the threshold is crossed: the nodes (or items) already running finish and commit,
# then the run commits and continues as new (a few events each).
SLACK = 60


def chain_spec(n: int) -> str:
    nodes = "".join(f"  - {{id: n{i}, function: 'tests.orchestration_steps:mark'}}\n" for i in range(n))
    edges = "".join(f"  - {{from: n{i}, to: n{i + 1}}}\n" for i in range(n - 1))
    return f"version: 1\nkind: graph\nid: chain\nnodes:\n{nodes}edges:\n{edges}"


def loop_spec(laps: int) -> str:
    """``tick`` -> ``tock`` -> back to ``tick`` until each ran ``laps`` times."""
    return (
        "version: 1\nkind: graph\nid: loop\nnodes:\n"
        "  - {id: tick, function: 'tests.temporal.long_steps:lap'}\n"
        "  - {id: tock, function: 'tests.temporal.long_steps:lap'}\n"
        "entry_points: [tick]\nedges:\n  - {from: tick, to: tock}\n  - {from: tock, to: tick, when: {output_contains: again}}\n"
        f"limits: {{max_node_executions: {2 * laps + 2}}}\n"
    )


def swarm_spec(handoffs: int) -> str:
    """Two agents handing the task back and forth $ORCHESTRA_TEST_HANDOFFS times, then the last one
    answers. Each keeps a window of its conversation, as a long swarm in production would: with its whole
    conversation every turn would load and send a longer one, O(n^2) over the run by design."""
    agents = "".join(
        f"  - name: {name}\n    conversation_manager: {{type: sliding_window, window_size: 8}}\n"
        "    model: 'function:tests.temporal.long_steps:rally'\n"
        for name in ("ping", "pong")
    )
    limits = f"limits: {{max_handoffs: {handoffs + 1}, max_iterations: {handoffs + 2}}}\n"
    return f"version: 1\nkind: swarm\nid: rally\nentry_point: ping\nagents:\n{agents}{limits}"


MAP_SPEC = """
version: 1
kind: graph
id: bigmap
nodes:
  - {id: split, function: 'tests.orchestration_steps:split'}
  - id: each
    map: {node: 'tests.orchestration_steps:slow_item', max_concurrency: 8}
  - {id: total, function: 'tests.orchestration_steps:total'}
edges:
  - {from: split, to: each}
  - {from: each, to: total}
"""


async def run_long(address: str, queue: str, loaded: Any, storage: str, **options: Any) -> tuple[Any, list]:
    """Run on Temporal with a small threshold; the summary and every workflow run's history, in order."""
    from orchestra import temporal

    target = temporal.TemporalTarget(address, "default", queue)
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id=loaded.spec.id,
        session_id="s1",
        storage=storage,
        task="go",
        run_id=secrets.token_hex(4),
        max_history_events=EVENTS,
        **options,
    )
    began = time.monotonic()
    async with temporal.create_worker(client, queue, [loaded]):
        handle = await temporal.start_run(client, target, request)
        summary = await handle.result()
    seconds = time.monotonic() - began
    # Follow the chain of workflow runs of the one workflow id, from the first.
    histories, run_id = [], handle.first_execution_run_id
    while run_id:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        continued = last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if continued
            else ""
        )
    # What a long run cost (``pytest -s`` shows it): the figures docs/temporal.md quotes.
    runs = summary.get("execution_count") or 0
    figures = {
        "workflow": handle.id,
        "node_runs": runs,
        "seconds": round(seconds, 1),
        "ms_per_node_run": round(1000 * seconds / max(runs, 1), 1),
        "workflow_runs": len(histories),
        "max_events": max(len(h.events) for h in histories),
        "max_bytes": max(sum(e.ByteSize() for e in h.events) for h in histories),
    }
    print(json.dumps(figures))
    return summary, histories


async def check_histories(histories: list, workflow_id: str) -> None:
    """Every run's history is bounded, and replays."""
    assert len(histories) >= 3, f"expected several continues, got {len(histories)} runs"
    sizes = [len(h.events) for h in histories]
    assert max(sizes) <= EVENTS + SLACK, sizes
    from orchestra.temporal.workflow import PipelineWorkflow

    replayer = Replayer(workflows=[PipelineWorkflow])
    for history in histories[:2] + histories[-1:]:  # the first, a middle one and the last
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, result.replay_failure
    assert all(h.workflow_id == workflow_id for h in histories)


async def test_a_long_chain_continues_as_new_with_the_local_result(temporal_address, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    text = chain_spec(NODES)
    loaded = parse_text(text, "chain.yaml")
    storage = f"file:{tmp_path}/store"
    summary, histories = await run_long(temporal_address, "q-can-chain", loaded, storage)
    assert summary["status"] == "completed", summary
    await check_histories(histories, "orchestra-chain-s1")
    (tmp_path / "chain.yaml").write_text(text)
    local = await load(tmp_path / "chain.yaml").invoke_async("go")
    assert summary["execution_order"] == local.execution_order == [f"n{i}" for i in range(NODES)]
    assert summary["execution_count"] == NODES  # not one node counted twice across the handovers
    runs = Counter(calls.read_text().split())
    assert set(runs.values()) == {2}, [n for n, c in runs.items() if c != 2]  # once there, once locally
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "chain")
    assert doc.fields["node/n0"]["result"]["output"] == local.results["n0"].output
    assert doc.fields[f"node/n{NODES - 1}"]["result"]["output"] == local.output
    assert doc.fields["run"]["status"] == "completed"


async def test_a_long_loop_continues_as_new_with_the_local_result(temporal_address, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_LAPS", str(LAPS))
    text = loop_spec(LAPS)
    loaded = parse_text(text, "loop.yaml")
    storage = f"file:{tmp_path}/store"
    summary, histories = await run_long(temporal_address, "q-can-loop", loaded, storage)
    assert summary["status"] == "completed", summary
    await check_histories(histories, "orchestra-loop-s1")
    ran = calls.read_text().split()
    assert len(ran) == len(set(ran)) == 2 * LAPS  # each lap's execution ran once, across the handovers
    (tmp_path / "loop.yaml").write_text(text)
    local = await load(tmp_path / "loop.yaml").invoke_async("go")
    assert summary["execution_order"] == local.execution_order == ["tick", "tock"] * LAPS
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "loop")
    assert doc.fields["node/tock"]["result"]["output"] == local.output == "done"


async def test_a_long_handoff_swarm_continues_as_new_with_the_local_result(
    temporal_address, tmp_path, monkeypatch
):
    monkeypatch.setenv("ORCHESTRA_TEST_HANDOFFS", str(HANDOFFS))
    text = swarm_spec(HANDOFFS)
    loaded = parse_text(text, "rally.yaml")
    storage = f"file:{tmp_path}/store"
    summary, histories = await run_long(temporal_address, "q-can-swarm", loaded, storage)
    assert summary["status"] == "completed", summary
    await check_histories(histories, "orchestra-rally-s1")
    (tmp_path / "rally.yaml").write_text(text)
    swarm = load(tmp_path / "rally.yaml")
    local = await swarm.invoke_async("go")
    assert summary["execution_order"] == local.execution_order
    assert len(summary["execution_order"]) == HANDOFFS + 1
    from orchestra import temporal

    assert await temporal.stored_output(storage, "s1", "rally") == local.output
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "rally")

    # Each agent's conversation went on across the handovers: one turn per execution, none replayed.
    # (Tool use ids are numbered by each model object: each turn's activity has its own.)
    def turns(messages: list) -> list:
        return [(m["role"], [part.get("text") or sorted(part) for part in m["content"]]) for m in messages]

    assert turns(doc.logs["agent/ping/messages"]) == turns(swarm.nodes["ping"].agent.messages)
    assert len(doc.logs["agent/ping/messages"]) <= 8  # the window, not the whole conversation


async def test_a_large_map_continues_as_new_and_runs_each_item_once(temporal_address, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_ITEMS", str(ITEMS))
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0")
    loaded = parse_text(MAP_SPEC, "bigmap.yaml")
    storage = f"file:{tmp_path}/store"
    summary, histories = await run_long(temporal_address, "q-can-map", loaded, storage)
    assert summary["status"] == "completed", summary
    await check_histories(histories, "orchestra-bigmap-s1")
    runs = Counter(calls.read_text().split())
    assert all(runs[f"each[{i}]"] == 1 for i in range(ITEMS)), runs.most_common(3)
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "bigmap")
    assert doc.fields["node/total"]["result"]["output"] == sum(2 * i for i in range(ITEMS))
    assert doc.fields["node/each"]["executions"] == 1  # one execution, carried over the handovers


async def test_a_commit_carries_what_the_logs_gained_not_the_whole_logs(
    temporal_address, tmp_path, monkeypatch
):
    """Each commit sends the items the run's logs gained since the last one (a node's place in the
    execution order), not the whole logs, so a commit costs the same late in a long run as early on,
    across the handovers too; the journal still holds the whole execution order."""
    from temporalio import activity
    from temporalio.worker import Worker

    from orchestra import temporal
    from orchestra.temporal.workflow import PipelineWorkflow

    sent: list[int] = []

    class Counting(PipelineActivities):
        @activity.defn(name="orchestra.commit")
        async def commit(self, request: CommitRequest) -> None:
            sent.append(len(request.logs.get("execution_order", [])))
            await super().commit(request)

    laps = 30
    monkeypatch.setenv("ORCHESTRA_TEST_LAPS", str(laps))
    loaded = parse_text(loop_spec(laps), "loop.yaml")
    storage = f"file:{tmp_path}/store"
    target = temporal.TemporalTarget(temporal_address, "default", "q-can-tails")
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id="loop", session_id="s1", storage=storage, task="go", run_id="r1", max_history_events=EVENTS
    )
    counting = Counting({"loop": loaded})
    activities = [counting.describe, counting.load_state, counting.execute_node, counting.commit]
    async with Worker(
        client, task_queue=target.task_queue, workflows=[PipelineWorkflow], activities=activities
    ):
        handle = await temporal.start_run(client, target, request)
        summary = await handle.result()
    assert summary["status"] == "completed", summary
    assert (await handle.describe()).run_id != handle.first_execution_run_id  # it handed over
    assert len(sent) > 2 * laps
    assert max(sent) == 1, sent  # one node's place per commit, never the whole log
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "loop")
    assert doc.logs["execution_order"] == ["tick", "tock"] * laps


ASK_SPEC = """
version: 1
kind: graph
id: asking
nodes:
  - {id: a0, function: 'tests.orchestration_steps:mark'}
  - {id: a1, function: 'tests.orchestration_steps:mark'}
  - {id: ask, function: 'tests.support:ask_human'}
  - {id: b0, function: 'tests.orchestration_steps:mark'}
  - {id: b1, function: 'tests.orchestration_steps:mark'}
edges:
  - {from: a0, to: a1}
  - {from: a1, to: ask}
  - {from: ask, to: b0}
  - {from: b0, to: b1}
"""


async def test_an_answer_sent_while_the_run_hands_over_goes_with_it(temporal_address, tmp_path, monkeypatch):
    """With a threshold of one event every workflow run hands over after its first node: the interrupt's
    answer arrives in the run that waits for it, which continues as new at once and must carry it (else
    the next run asks again and the run never ends)."""
    import anyio

    from orchestra import temporal
    from orchestra.temporal.workflow import PipelineWorkflow

    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    loaded = parse_text(ASK_SPEC, "asking.yaml")
    storage = f"file:{tmp_path}/store"
    target = temporal.TemporalTarget(temporal_address, "default", "q-can-ask")
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id="asking", session_id="s1", storage=storage, task="go", run_id="r1", max_history_events=1
    )
    async with temporal.create_worker(client, target.task_queue, [loaded]):
        handle = await temporal.start_run(client, target, request)
        for _ in range(300):  # the handle follows the workflow id: the run that waits now
            progress = await handle.query(PipelineWorkflow.progress)
            if progress["status"] == "interrupted":
                break
            await anyio.sleep(0.1)
        assert progress["interrupts"][0]["name"] == "approve", progress
        current = await temporal.running_handle(client, "asking", "s1")
        assert current is not None
        assert (await current.describe()).run_id != handle.first_execution_run_id  # it continued before
        await current.signal(PipelineWorkflow.respond, {progress["interrupts"][0]["id"]: "yes"})
        summary = await handle.result()
    assert summary["status"] == "completed", summary
    assert summary["execution_order"] == ["a0", "a1", "ask", "ask", "b0", "b1"]  # as locally
    assert Counter(calls.read_text().split()) == {"a0": 1, "a1": 1, "b0": 1, "b1": 1}
    assert await temporal.stored_output(storage, "s1", "asking") == "b1 done"
    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "asking")
    assert doc.fields["node/ask"]["result"]["output"] == "human said yes"


def test_the_threshold_setting_changes_a_pipeline_s_version_only_when_set():
    """Workers upgraded to this version keep the runs in flight: a spec that leaves ``continue_as_new``
    alone hashes as it did before the setting existed (its dump without it); one that sets it differs."""
    import hashlib

    from orchestra.temporal import spec_hash

    text = chain_spec(3)
    plain = parse_text(text, "chain.yaml")
    dumped = plain.spec.model_dump_json(exclude={"temporal": {"continue_as_new"}})
    assert spec_hash(plain) == hashlib.sha256(dumped.encode()).hexdigest()[:16]
    tuned = parse_text(text + "temporal: {continue_as_new: {max_events: 500}}\n", "chain.yaml")
    assert spec_hash(tuned) != spec_hash(plain)
