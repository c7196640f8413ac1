"""Runs pinned to their version: a resume under a changed graph runs the migration registered for the
saved version, or is refused with what changed; ``orchestra sessions migrate`` does it for a storage."""

import itertools
import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from orchestra import Agent, load
from orchestra.cli import app
from orchestra.errors import RunError
from orchestra.multiagent import Graph, SavedRun, Swarm
from orchestra.multiagent.migrations import describe_changes
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel, ToolCall

V1 = """
version: 1
kind: graph
id: intake
pipeline_version: v1
state: {schema: 1}
nodes:
  - {id: fetch, function: 'tests.orchestration_steps:mark'}
  - {id: draft, function: 'tests.orchestration_steps:mark'}
  - {id: approve, function: 'tests.orchestration_steps:approve'}
  - {id: publish, function: 'tests.orchestration_steps:mark'}
edges:
  - {from: fetch, to: draft}
  - {from: draft, to: approve}
  - {from: approve, to: publish}
"""
V2 = V1.replace(
    "pipeline_version: v1", "pipeline_version: v2\nmigrations: tests.orchestration_steps"
).replace("draft", "write")
V2_WITHOUT_MIGRATIONS = V1.replace("pipeline_version: v1", "pipeline_version: v2").replace("draft", "write")


def answer(result):
    return [{"interruptResponse": {"interruptId": result.interrupts[0].id, "response": "yes"}}]


def test_fifty_interrupted_runs_resume_after_a_deploy_that_renamed_a_node(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    (tmp_path / "v1.yaml").write_text(V1)
    (tmp_path / "v2.yaml").write_text(V2)
    (tmp_path / "v2-bare.yaml").write_text(V2_WITHOUT_MIGRATIONS)
    storage = f"file:{tmp_path / 'store'}"
    questions = {}
    for n in range(50):
        result = load(tmp_path / "v1.yaml", session_id=f"s{n}", storage=storage)("intake this")
        assert result.status.value == "interrupted"
        questions[f"s{n}"] = result
    assert Counter(calls.read_text().split()) == {"fetch": 50, "draft": 50}

    # v2 without its migrations: every resume is refused, naming what changed; nothing is changed.
    bare = load(tmp_path / "v2-bare.yaml", session_id="s0", storage=storage)
    with pytest.raises(RunError, match=r"node 'draft' renamed to 'write'.*migration for version 'v1'"):
        bare(answer(questions["s0"]))

    runner = CliRunner()
    shown = runner.invoke(
        app, ["sessions", "migrate", str(tmp_path / "v2.yaml"), "--storage", storage, "--dry-run", "--json"]
    )
    assert shown.exit_code == 0, shown.output
    outcomes = json.loads(shown.stdout)
    assert len(outcomes) == 50
    assert {o["outcome"] for o in outcomes} == {"would migrate"}
    assert {(o["from_version"], o["to_version"]) for o in outcomes} == {("v1", "v2")}
    assert {"field node/draft removed", "field node/write added", "field state changed"} <= set(
        outcomes[0]["changes"]
    )
    # Half are migrated ahead of the resume, half as they resume.
    migrated = runner.invoke(
        app,
        ["sessions", "migrate", str(tmp_path / "v2.yaml"), "--storage", storage, "--json"]
        + [option for n in range(25) for option in ("--session-id", f"s{n}")],
    )
    assert {o["outcome"] for o in json.loads(migrated.stdout)} == {"migrated"}

    for session, interrupted in questions.items():
        pipeline = load(tmp_path / "v2.yaml", session_id=session, storage=storage)
        result = pipeline(answer(interrupted))
        assert result.status.value == "completed", (session, result.reason)
        assert result.results["write"].output == "draft done"  # the saved result, under its new name
        assert pipeline.state.get("schema") == 2
        assert pipeline.run["version"] == "v2"
        assert pipeline.run["migrations"] == [{"from": "v1", "to": "v2"}]
    # The steps that completed on v1 never ran again; the renamed one never ran on v2.
    assert Counter(calls.read_text().split()) == {"fetch": 50, "draft": 50, "approve": 50, "publish": 50}


def chain(names, *, version=None, migrations=None, session=None):
    agents = [Agent(name=n, model=FunctionModel(lambda m, s, n=n: f"{n} says hi")) for n in names]
    edges = list(itertools.pairwise(names))
    return Graph(agents, edges, id="chain", version=version, migrations=migrations, session_manager=session)


def stop_after(node):
    class Stop:
        def register_hooks(self, registry):
            from orchestra.multiagent.events import BeforeNodeCall

            def before(event):
                if event.node_id == node:
                    event.interrupt("wait")

            registry.add_callback(BeforeNodeCall, before)

    return Stop()


def test_a_renamed_agent_node_keeps_its_conversation_and_state():
    store = InMemoryStorage()
    v1 = chain(["a", "b", "c"], version="v1", session=SnapshotSessionManager("s", storage=store))
    v1.hooks.add_hook(stop_after("c"))
    first = v1("go")
    assert first.status.value == "interrupted"

    def migrate(run: SavedRun) -> None:
        run.rename_node("b", "bee")

    v2 = chain(
        ["a", "bee", "c"],
        version="v2",
        migrations={"v1": migrate},
        session=SnapshotSessionManager("s", storage=store),
    )
    result = v2([{"interruptResponse": {"interruptId": first.interrupts[0].id, "response": "go"}}])
    assert result.status.value == "completed"
    assert result.results["bee"].output == "b says hi"
    assert [m["role"] for m in v2.nodes["bee"].agent.messages] == ["user", "assistant"]
    assert v2.nodes["bee"].agent.messages[-1]["content"][0]["text"] == "b says hi"
    assert result.execution_order[-1] == "c"
    assert v2.nodes["a"].agent.model.requests.__len__() == 0  # completed nodes did not run again


def test_migrations_chain_and_a_failing_one_changes_nothing():
    store = InMemoryStorage()
    v1 = chain(["a", "b"], version="v1", session=SnapshotSessionManager("s", storage=store))
    v1.hooks.add_hook(stop_after("b"))
    first = v1("go")
    steps = []

    def one(run):
        steps.append("v1")
        run.rename_node("a", "x")
        return "v2"

    def two(run):
        steps.append("v2")
        run.rename_node("x", "y")

    def broken(run):
        raise KeyError("no such field")

    bad = chain(
        ["y", "b"],
        version="v3",
        migrations={"v1": broken},
        session=SnapshotSessionManager("s", storage=store),
    )
    with pytest.raises(RunError, match=r"the migration from version 'v1' \(.*broken\) raised KeyError"):
        bad([{"interruptResponse": {"interruptId": first.interrupts[0].id, "response": "go"}}])
    good = chain(
        ["y", "b"],
        version="v3",
        migrations={"v1": one, "v2": two},
        session=SnapshotSessionManager("s", storage=store),
    )
    result = good([{"interruptResponse": {"interruptId": first.interrupts[0].id, "response": "go"}}])
    assert result.status.value == "completed"
    assert steps == ["v1", "v2"]
    assert good.run["migrations"] == [{"from": "v1", "to": "v2"}, {"from": "v2", "to": "v3"}]


def test_a_migration_that_leaves_an_unknown_node_is_refused():
    store = InMemoryStorage()
    v1 = chain(["a", "b"], version="v1", session=SnapshotSessionManager("s", storage=store))
    v1.hooks.add_hook(stop_after("b"))
    first = v1("go")
    v2 = chain(
        ["z", "b"],
        version="v2",
        migrations={"v1": lambda run: None},
        session=SnapshotSessionManager("s", storage=store),
    )
    with pytest.raises(RunError, match=r"still has nodes the graph does not: a; rename or remove them"):
        v2([{"interruptResponse": {"interruptId": first.interrupts[0].id, "response": "go"}}])


def test_a_refusal_names_every_kind_of_change():
    def edge_condition(state):
        return True

    old = Graph(
        {"a": lambda: 1, "b": lambda: 2, "c": lambda: 3, "gone": lambda: 4},
        [("a", "b"), ("b", "c"), ("a", "gone")],
    )
    new = Graph(
        {"a": lambda: 1, "bb": lambda: 2, "c": lambda: 3, "extra": lambda: 5},
        [("a", "bb"), ("bb", "c", edge_condition), ("bb", "extra")],
        joins={"c": "any"},
    )
    changes = describe_changes(old.topology(), new.topology())
    assert "node 'b' renamed to 'bb'" in changes
    assert "nodes removed: gone" in changes
    assert "nodes added: extra" in changes
    assert "edges removed: a -> gone" in changes
    assert "edges added: bb -> extra" in changes
    assert any(c.startswith("the condition of edge bb -> c changed (none -> ") for c in changes)
    assert "the join of 'c' changed (all -> any)" in changes
    assert describe_changes(None, new.topology()) == [
        "the saved run predates recorded topologies, so what changed cannot be listed"
    ]


def test_without_a_version_change_a_changed_graph_is_refused_and_force_still_resumes():
    store = InMemoryStorage()
    v1 = chain(["a", "b"], session=SnapshotSessionManager("s", storage=store))
    v1.hooks.add_hook(stop_after("b"))
    first = v1("go")
    changed = chain(["a", "b", "c"], session=SnapshotSessionManager("s", storage=store))
    reply = [{"interruptResponse": {"interruptId": first.interrupts[0].id, "response": "go"}}]
    with pytest.raises(RunError, match=r"nodes added: c.*give the graph a version="):
        changed(reply)
    forced = chain(["a", "b", "c"], session=SnapshotSessionManager("s", storage=store))
    assert forced(reply, force_resume=True).status.value == "completed"


def test_a_swarm_migration_renames_the_agent_that_holds_the_task():
    def agent(name):
        def reply(messages, specs):
            if name == "triage":
                return ToolCall("handoff_to_agent", {"agent_name": "billing", "message": "refund"})
            return f"{name} done"

        return Agent(name=name, model=FunctionModel(reply))

    store = InMemoryStorage()
    v1 = Swarm(
        [agent("triage"), agent("billing")],
        id="desk",
        version="v1",
        session_manager=SnapshotSessionManager("s", storage=store),
    )
    v1.hooks.add_hook(stop_after("billing"))
    first = v1("help")
    assert first.status.value == "interrupted"
    v2 = Swarm(
        [agent("triage"), agent("payments")],
        id="desk",
        version="v2",
        migrations={"v1": lambda run: run.rename_node("billing", "payments")},
        session_manager=SnapshotSessionManager("s", storage=store),
    )
    result = v2([{"interruptResponse": {"interruptId": first.interrupts[0].id, "response": "go"}}])
    assert result.status.value == "completed"
    assert result.node_history == ["triage", "payments"]
    assert result.handoffs == [{"from": "triage", "to": "payments", "message": "refund"}]
