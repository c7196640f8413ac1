"""Scenarios every backend must pass alike (issue 39 item 2): each runs locally and on Temporal, and what
the session holds afterwards is compared between them. A feature added to local runs without Temporal
fails here. Budgets (between nodes, before model calls, a resume with a larger one) and a fresh swarm run
that resets its agents."""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest

from orchestra.session.admin import load_scope
from orchestra.spec import build, parse_text
from orchestra.storage import storage_from_uri

pytestmark = pytest.mark.timeout(300)

BACKENDS = ["local", "temporal"]

BUDGETED = """
version: 1
kind: graph
id: budgeted
budget: {model_calls: 3}
agents:
  - {name: a, model: {provider: function, function: 'tests.support:echo_reply'}}
  - {name: b, model: {provider: function, function: 'tests.support:echo_reply'}}
  - {name: c, model: {provider: function, function: 'tests.support:echo_reply'}, budget: {model_calls: 0}}
  - {name: d, model: {provider: function, function: 'tests.support:echo_reply'}}
nodes: [{agent: a}, {agent: b}, {agent: c}, {agent: d}]
edges: [{from: a, to: b}, {from: b, to: c}, {from: c, to: d}]
"""

SWARM = """
version: 1
kind: swarm
id: helpers
entry_point: helper
agents:
  - {name: helper, model: {provider: function, function: 'tests.support:echo_reply'}}
"""


class Backend:
    """Runs a spec in one session on ``local`` or ``temporal``; the session is read back the same way."""

    def __init__(self, name: str, address: str | None, storage: str) -> None:
        self.name, self.address, self.storage = name, address, storage

    async def run(self, text: str, session: str, task: Any, budget: dict[str, Any] | None = None) -> None:
        loaded = parse_text(text, "scenario.yaml")
        if self.name == "local":
            orchestrator = build(loaded, session_id=session, storage=self.storage)
            if budget is not None:
                from orchestra.budget import Budget

                orchestrator.budget = Budget.from_json(budget)
            await orchestrator.invoke_async(task)
            return
        from orchestra import temporal

        assert self.address is not None
        queue = f"q-scenario-{loaded.spec.id}"
        target = temporal.TemporalTarget(self.address, "default", queue)
        client = await temporal.connect(target)
        request = temporal.RunRequest(
            spec_id=loaded.spec.id,
            session_id=session,
            storage=self.storage,
            task=task,
            run_id=secrets.token_hex(4),
            resume=task is None,
            budget=budget,
        )
        async with temporal.create_worker(client, queue, [loaded]):
            handle = await temporal.start_run(client, target, request)
            await handle.result()

    async def saved(self, session: str, scope: str) -> dict[str, Any]:
        """What a user sees of the run: its status and reason, order, spending, and each node's output."""
        doc = await load_scope(storage_from_uri(self.storage), session, "multiAgent", scope)
        run = doc.fields["run"]
        nodes = {
            name[len("node/") :]: (record.get("status"), (record.get("result") or {}).get("output"))
            for name, record in doc.fields.items()
            if name.startswith("node/")
        }
        spent = {k: v for k, v in (run.get("spent") or {}).items() if k == "model_calls"}
        # A map's progress (a stopped map's, or a nested map's): which items ended how, and their outputs.
        maps = {
            name: (record.get("status"), record.get("output"))
            for name, record in doc.fields.items()
            if name.startswith("map/") and "/item/" in name
        }
        return {
            "status": run["status"],
            "reason": run.get("reason"),
            "order": list(doc.logs.get("execution_order", [])),
            "spent": spent,
            "budget": run.get("budget"),  # the limits the run ran under
            "nodes": nodes,
            "maps": maps,
            "map_lists": sorted(
                name for name in doc.fields if name.startswith("map/") and "/item/" not in name
            ),
        }


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    address = request.getfixturevalue("temporal_address") if request.param == "temporal" else None
    return Backend(request.param, address, f"file:{tmp_path}/store")


@pytest.fixture
def local(tmp_path):
    return Backend("local", None, f"file:{tmp_path}/local-store")


async def test_a_budget_stops_the_run_before_a_node_or_call_it_cannot_afford(backend, local):
    """The run's budget stops it between nodes, an agent's own budget before its model call; a resume
    with a larger budget goes on where it stopped. The same on both backends."""
    seen = []
    for run in (backend, local):
        await run.run(BUDGETED, "s1", "go")
        first = await run.saved("s1", "budgeted")
        await run.run(BUDGETED, "s1", None, budget={"model_calls": 10})
        second = await run.saved("s1", "budgeted")
        seen.append((first, second))
    (first, second), (local_first, local_second) = seen
    assert first == local_first
    assert first["status"] == "interrupted"
    assert "agent 'c' spent its model_calls budget" in first["reason"]
    assert first["order"] == ["a", "b"]
    assert first["spent"] == {"model_calls": 2}
    # c's own budget (0 calls) still stops it on resume: the run's larger budget does not raise it.
    assert second == local_second
    assert second["status"] == "interrupted"
    assert second["order"] == ["a", "b"]


async def test_a_run_budget_stops_the_run_between_nodes(backend, local):
    spec = BUDGETED.replace("budget: {model_calls: 0}", "")
    outcomes = []
    for run in (backend, local):
        await run.run(spec, "s2", "go", budget={"model_calls": 2})
        outcomes.append(await run.saved("s2", "budgeted"))
        await run.run(spec, "s2", None, budget={"model_calls": 10})
        outcomes.append(await run.saved("s2", "budgeted"))
    stopped, done, local_stopped, local_done = outcomes
    assert stopped == local_stopped
    assert stopped["status"] == "interrupted"
    assert "run of graph 'budgeted'" in stopped["reason"]
    assert stopped["order"] == ["a", "b"]
    assert done == local_done
    assert done["status"] == "completed"
    assert done["order"] == ["a", "b", "c", "d"]
    assert done["spent"] == {"model_calls": 4}  # each agent called its model once: none ran twice


async def test_a_fresh_swarm_run_resets_its_agents(backend, local):
    """A swarm's second run in a session starts its agents afresh (``history: run``, the default)."""
    outputs = []
    for run in (backend, local):
        for task in ("first", "second"):
            await run.run(SWARM, "s3", task)
            outputs.append((await run.saved("s3", "helpers"))["nodes"]["helper"])
    assert outputs[:2] == outputs[2:]
    assert outputs[1][1].startswith("echo: second"), outputs[1]
    assert outputs[1][1].endswith("(turn 1)"), outputs[1]  # the first run's turn is forgotten


async def test_a_swarm_with_private_history_keeps_its_agents_across_runs(backend, local):
    """``history: private``: each agent keeps its own conversation from one run to the next."""
    spec = SWARM.replace("entry_point: helper", "entry_point: helper\nhistory: private")
    outputs = []
    for run in (backend, local):
        for task in ("first", "second"):
            await run.run(spec, "s5", task)
            outputs.append((await run.saved("s5", "helpers"))["nodes"]["helper"])
    assert outputs[:2] == outputs[2:]
    assert outputs[1][1].endswith("(turn 2)"), outputs[1]  # the first run's turn is remembered


TOOL_AGENT = """
version: 1
kind: graph
id: asker
agents:
  - {name: boss, model: 'function:tests.temporal.long_steps:asks_helper', tools: ['tests.temporal.long_steps:helper']}
nodes: [{agent: boss}]
"""


async def test_an_agent_used_as_a_tool_is_saved_with_the_run(backend, local):
    """A node's agent calls another agent as a tool: that agent's conversation is saved with the run (as
    ``agent/<node>/tools/<tool>``), the same on both backends."""
    from tests.temporal import long_steps

    saved = []
    for run in (backend, local):
        long_steps.helper.messages.clear()  # one agent object per process (an import path): start it empty
        await run.run(TOOL_AGENT, "s4", "go")
        doc = await load_scope(storage_from_uri(run.storage), "s4", "multiAgent", "asker")
        messages = doc.logs.get("agent/boss/tools/helper/messages", [])
        saved.append(([m["role"] for m in messages], "agent/boss/tools/helper" in doc.fields))
        assert (await run.saved("s4", "asker"))["nodes"]["boss"][0] == "completed"
    assert saved[0] == saved[1]
    assert saved[0] == (["user", "assistant"], True)


KILLED = """
version: 1
kind: graph
id: killed
agents:
  - name: researcher
    model: 'function:tests.temporal.long_steps:counted_reply'
    tools: ['tests.temporal.long_steps:look_up']
    budget: {model_calls: 2}
nodes: [{agent: researcher}]
"""


def test_spending_survives_a_worker_sigkill(temporal_address, tmp_path, monkeypatch):
    """An agent may call its model twice; its turn calls it, then a tool, then it again. The worker is
    SIGKILLed in the tool, after the first call was charged: the retried attempt starts the turn over
    (the tool has no recorded effects) and must count that call, so its second call is refused, as a
    local run resumed after a kill refuses it (the call was saved with the run there)."""

    import anyio

    from orchestra import temporal
    from tests.temporal.conftest import workers

    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    spec = tmp_path / "killed.yaml"
    spec.write_text(KILLED)
    storage = f"file:{tmp_path}/store"
    queue = "q-scenario-killed"

    async def start() -> Any:
        target = temporal.TemporalTarget(temporal_address, "default", queue)
        client = await temporal.connect(target)
        request = temporal.RunRequest(
            spec_id="killed", session_id="s1", storage=storage, task="go", run_id="r1", heartbeat_seconds=2
        )
        return await temporal.start_run(client, target, request)

    with workers(temporal_address, queue, spec, count=2) as pool:
        handle = anyio.run(start)
        for _ in range(
            2400
        ):  # bounded: a node that never reaches its tool fails the test instead of hanging it
            if tools := [c for c in (calls.read_text().split() if calls.exists() else []) if "@" in c]:
                break
            time.sleep(0.05)
        assert tools, "no worker reached the node's tool"
        running = int(tools[0].split("@")[1])  # the worker running the node: SIGKILL it in the tool
        pool.kill(pool.by_pid(running))
        summary = anyio.run(handle.result)
    ran = [c.split("@")[0] for c in calls.read_text().split()]
    assert summary["status"] == "interrupted", summary
    assert "agent 'researcher' spent its model_calls budget (2 of 2)" in summary["reason"]
    assert ran == ["call", "tool", "call", "tool"]  # the retried turn's second call never went out


NESTED_MAP = """
version: 1
kind: graph
id: nested-map
nodes:
  - {id: split, function: 'tests.orchestration_steps:groups'}
  - id: each
    map:
      node: {map: {node: 'tests.orchestration_steps:inner_item', max_concurrency: 2}}
      max_concurrency: 2
  - {id: total, function: 'tests.orchestration_steps:flat_total'}
edges:
  - {from: split, to: each}
  - {from: each, to: total}
"""


async def test_a_map_of_maps_gives_each_item_its_result(backend, local, tmp_path, monkeypatch):
    """A map whose item is a map: every inner item runs once, the outputs nest in item order, and the
    map's progress is gone once it completed. The same on both backends."""
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.01")
    saved = []
    for run in (backend, local):
        calls.unlink(missing_ok=True)
        await run.run(NESTED_MAP, "s6", "go")
        saved.append(await run.saved("s6", "nested-map"))
        ran = calls.read_text().split()
        assert sorted(ran) == sorted(["split", "total", *(f"each<{i}>" for i in range(7))]), ran
    assert saved[0] == saved[1]
    assert saved[0]["status"] == "completed"
    assert saved[0]["nodes"]["each"] == ("completed", [[0, 10], [20, 30, 40], [50, 60]])
    assert saved[0]["nodes"]["total"] == ("completed", 210)
    assert saved[0]["maps"] == {}
    assert saved[0]["map_lists"] == []


MAPPED_AGENTS = """
version: 1
kind: graph
id: mapped
budget: {model_calls: 2}
agents:
  - {name: a, model: {provider: function, function: 'tests.support:echo_reply'}}
nodes:
  - {id: split, function: 'tests.orchestration_steps:split'}
  - id: each
    map: {node: a, max_concurrency: 1}
edges:
  - {from: split, to: each}
"""


async def test_a_maps_items_spend_the_run_budget(backend, local, monkeypatch):
    """A map's agent items call their models under the run's budget: the third item is refused its call,
    the run stops (resumable) with the two items done, and a resume with a larger budget runs only the
    items left. The same on both backends."""
    monkeypatch.setenv("ORCHESTRA_TEST_ITEMS", "4")
    seen = []
    for run in (backend, local):
        await run.run(MAPPED_AGENTS, "s7", "go")
        first = await run.saved("s7", "mapped")
        await run.run(MAPPED_AGENTS, "s7", None, budget={"model_calls": 10})
        seen.append((first, await run.saved("s7", "mapped")))
    (first, second), (local_first, local_second) = seen
    assert first == local_first
    assert first["status"] == "interrupted"
    assert "run of graph 'mapped' spent its model_calls budget (2 of 2)" in first["reason"], first["reason"]
    assert first["spent"] == {"model_calls": 2}
    assert sorted(first["maps"]) == ["map/each/item/0", "map/each/item/1"]
    assert second == local_second
    assert second["status"] == "completed"
    assert second["spent"] == {"model_calls": 4}  # each item called its model once: none ran twice
    assert len(second["nodes"]["each"][1]) == 4


def _done_inner_items(root: Any, session: str, groups: list[list[int]]) -> tuple[set[str], set[str]]:
    """The inner items of ``each`` that completed (their calls' names) as the session holds them, and of
    those, the ones committed on their own: their outer item (their group) had not completed."""
    import anyio

    from orchestra.errors import SessionError

    try:
        doc = anyio.run(load_scope, storage_from_uri(f"file:{root}"), session, "multiAgent", "nested-map")
    except SessionError:  # not started yet
        return set(), set()
    if (doc.fields.get("node/each") or {}).get("status") == "completed":
        return {f"each<{n}>" for group in groups for n in group}, set()  # its items' records went with it
    whole, alone = set(), set()
    for name, record in doc.fields.items():
        if not name.startswith("map/") or "/item/" not in name or record.get("status") != "completed":
            continue
        key, _, index = name[len("map/") :].partition("/item/")
        if key == "each":  # an outer item: its whole group
            whole |= {f"each<{n}>" for n in groups[int(index)]}
        else:
            alone.add(f"each<{groups[int(key.split(':')[1])][int(index)]}>")
    return whole | alone, alone - whole


def test_a_worker_sigkill_in_a_nested_map_reruns_no_completed_inner_item(
    temporal_address, tmp_path, monkeypatch
):
    """Two workers run a map of maps; both are SIGKILLed once an inner item was committed while its
    outer item (its group) was still running, and a new worker goes on. No inner item that completed
    runs again (each is an activity of its own, committed as it ends), and the result is the local
    run's."""
    from collections import Counter

    import anyio

    from orchestra import load, temporal
    from tests.temporal.conftest import workers

    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.3")
    monkeypatch.setenv("ORCHESTRA_TEST_GROUPS", "4")
    groups = [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    spec = tmp_path / "nested-map.yaml"
    spec.write_text(NESTED_MAP)
    root = tmp_path / "store"
    queue = "q-scenario-nested-kill"

    async def start() -> Any:
        target = temporal.TemporalTarget(temporal_address, "default", queue)
        client = await temporal.connect(target)
        request = temporal.RunRequest(
            spec_id="nested-map",
            session_id="s1",
            storage=f"file:{root}",
            task="go",
            run_id="r1",
            heartbeat_seconds=2,
        )
        return await temporal.start_run(client, target, request)

    def inner_calls() -> list[str]:
        return [c for c in (calls.read_text().split() if calls.exists() else []) if c.startswith("each<")]

    with workers(temporal_address, queue, spec, count=2) as pool:
        handle = anyio.run(start)
        deadline = time.monotonic() + 60
        # Before the fix an item's nested map ran inside its activity: no inner item was ever committed
        # on its own, and this waits in vain.
        while time.monotonic() < deadline and not _done_inner_items(root, "s1", groups)[1]:
            time.sleep(0.05)
        pool.kill()  # both: the run goes on on a new worker, from what was committed
        pool.start()
        done_before, alone = _done_inner_items(root, "s1", groups)  # committed before the kill landed
        summary = anyio.run(handle.result)
    assert summary["status"] == "completed", summary
    assert alone, "the kill should land while a group had inner items committed and others running"
    runs = Counter(inner_calls())
    assert set(runs) == {f"each<{n}>" for n in range(10)}
    for item in done_before:
        assert runs[item] == 1, f"{item} had completed but ran {runs[item]} times"
    assert all(count <= 2 for count in runs.values()), runs
    doc = anyio.run(load_scope, storage_from_uri(f"file:{root}"), "s1", "multiAgent", "nested-map")
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(tmp_path / "local-calls"))
    local = anyio.run(load(spec).invoke_async, "go")
    assert doc.fields["node/each"]["result"]["output"] == local.results["each"].output
    assert doc.fields["node/total"]["result"]["output"] == local.output == 450


GRAPH_PER_ITEM = """
version: 1
kind: graph
id: graph-per-item
nodes:
  - {id: split, function: 'tests.orchestration_steps:groups'}
  - id: each
    map:
      node:
        graph:
          kind: graph
          id: per-group
          nodes:
            - {id: parse, function: 'tests.orchestration_steps:group_of'}
            - {id: inner, map: {node: 'tests.orchestration_steps:inner_item', max_concurrency: 2}}
          edges: [{from: parse, to: inner}]
edges: [{from: split, to: each}]
"""


async def test_a_graph_per_item_runs_its_own_map(backend, local, tmp_path, monkeypatch):
    """A map whose item is a graph with a map of its own: each inner item runs once, each item's graph
    is saved under the session in a scope of its own, the same on both backends."""
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.01")
    saved = []
    for run in (backend, local):
        calls.unlink(missing_ok=True)
        await run.run(GRAPH_PER_ITEM, "s8", "go")
        result = await run.saved("s8", "graph-per-item")
        items = [
            await load_scope(
                storage_from_uri(run.storage), "s8", "multiAgent", f"graph-per-item.each.each.{i}"
            )
            for i in range(3)
        ]
        inner = [doc.fields["node/inner"]["result"]["output"] for doc in items]
        saved.append((result, inner))
        assert sorted(c for c in calls.read_text().split() if c.startswith("inner")) == sorted(
            f"inner<{i}>" for i in range(7)
        )
    assert saved[0] == saved[1]
    assert saved[0][0]["status"] == "completed"
    assert saved[0][1] == [[0, 10], [20, 30, 40], [50, 60]]


GRAPH_PER_INNER_ITEM = """
version: 1
kind: graph
id: graphs-inside
nodes:
  - {id: split, function: 'tests.orchestration_steps:groups'}
  - id: each
    map:
      node:
        map:
          node:
            graph:
              kind: graph
              id: per-number
              nodes: [{id: times, function: 'tests.orchestration_steps:number_of'}]
edges: [{from: split, to: each}]
"""


async def test_a_map_of_maps_of_graphs_saves_each_graph(backend, local, tmp_path, monkeypatch):
    """A map of maps whose inner item is a graph: each inner item's graph runs once and is saved in a
    scope of its own (so a retried item resumes it), the same on both backends."""
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    saved = []
    for run in (backend, local):
        calls.unlink(missing_ok=True)
        await run.run(GRAPH_PER_INNER_ITEM, "s9", "go")
        storage = storage_from_uri(run.storage)
        scope = "graphs-inside.each.each.1.2"  # outer item 1 (2, 3, 4), its inner item 2 (4)
        inner = await load_scope(storage, "s9", "multiAgent", scope)
        saved.append(
            ((await run.saved("s9", "graphs-inside"))["nodes"]["each"], inner.fields["node/times"]["status"])
        )
        assert sorted(c for c in calls.read_text().split() if c.startswith("g<")) == sorted(
            f"g<{i}>" for i in range(7)
        )
    assert saved[0] == saved[1]
    assert saved[0][0][0] == "completed"
    assert saved[0][1] == "completed"
