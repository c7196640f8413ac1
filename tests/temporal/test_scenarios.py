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
        return {
            "status": run["status"],
            "reason": run.get("reason"),
            "order": list(doc.logs.get("execution_order", [])),
            "spent": spent,
            "budget": run.get("budget"),  # the limits the run ran under
            "nodes": nodes,
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
    import signal

    import anyio

    from orchestra import temporal
    from tests.temporal.conftest import worker_process

    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    spec = tmp_path / "killed.yaml"
    spec.write_text(KILLED)
    storage = f"file:{tmp_path}/store"
    queue = "q-scenario-killed"
    workers = [worker_process(temporal_address, queue, spec) for _ in range(2)]

    async def start() -> Any:
        target = temporal.TemporalTarget(temporal_address, "default", queue)
        client = await temporal.connect(target)
        request = temporal.RunRequest(
            spec_id="killed", session_id="s1", storage=storage, task="go", run_id="r1", heartbeat_seconds=2
        )
        return await temporal.start_run(client, target, request)

    try:
        handle = anyio.run(start)
        while not (tools := [c for c in (calls.read_text().split() if calls.exists() else []) if "@" in c]):
            time.sleep(0.05)
        running = int(tools[0].split("@")[1])  # the worker running the node: SIGKILL it in the tool
        (victim,) = [w for w in workers if w.pid == running]
        workers.remove(victim)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        victim.stderr.close()
        summary = anyio.run(handle.result)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(30)
            worker.stderr.close()
    ran = [c.split("@")[0] for c in calls.read_text().split()]
    assert summary["status"] == "interrupted", summary
    assert "agent 'researcher' spent its model_calls budget (2 of 2)" in summary["reason"]
    assert ran == ["call", "tool", "call", "tool"]  # the retried turn's second call never went out
