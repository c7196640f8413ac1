"""Orchestrator time travel: immutable run snapshots, restore, fork into a new session, export/import."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.errors import SessionError
from orchestra.multiagent import Graph, NodeInput, Status
from orchestra.session import SnapshotSessionManager, export_scope
from orchestra.session.transfer import fork_scope, import_scope
from orchestra.storage import InMemoryStorage


def chain(
    storage: Any, session_id: str, calls: list[str], fail_at: str | None = None, **options: Any
) -> Graph:
    def step(node_input: NodeInput) -> str:
        calls.append(node_input.node_id)
        if node_input.node_id == fail_at:
            raise RuntimeError(f"{fail_at} is broken")
        return f"{node_input.node_id} done"

    return Graph(
        {"a": step, "b": step, "c": step},
        edges=[("a", "b"), ("b", "c")],
        id="chain",
        session_manager=SnapshotSessionManager(session_id, storage=storage, **options),
    )


async def test_snapshots_after_every_node_restore_and_resume_from_there() -> None:
    storage = InMemoryStorage()
    calls: list[str] = []
    graph = chain(storage, "s", calls, multi_agent_snapshots="node")
    assert (await graph.invoke_async("go")).status == Status.COMPLETED
    manager: SnapshotSessionManager = graph.session_manager
    snapshots = await manager.list_run_snapshots(graph)
    assert len(snapshots) == 3  # after a, after b, after c

    await manager.restore_run_snapshot(graph, snapshots[0])  # back to "a completed"
    calls.clear()
    resumed = await graph.invoke_async()
    assert resumed.status == Status.COMPLETED
    assert calls == ["b", "c"]


async def test_an_interrupt_takes_a_snapshot_and_a_fork_answers_it_differently() -> None:
    storage = InMemoryStorage()

    def build(session_id: str) -> Graph:
        def ask(node_input: NodeInput) -> str:
            return f"answer: {node_input.interrupt('choose', reason='A or B?')}"

        return Graph(
            {"ask": ask},
            id="hitl",
            session_manager=SnapshotSessionManager(session_id, storage=storage),
        )

    graph = build("main")
    first = await graph.invoke_async("go")
    assert first.status == Status.INTERRUPTED
    (snapshot_id,) = await graph.session_manager.list_run_snapshots(graph)
    copied = await graph.session_manager.fork(graph, "alt", snapshot_id)
    assert copied == ["multiAgent/hitl"]

    response = [first.interrupts[0].to_response("A")]
    assert (await graph.invoke_async(response)).output == "answer: A"
    other = [first.interrupts[0].to_response("B")]
    assert (await build("alt").invoke_async(other)).output == "answer: B"
    assert (await build("main").invoke_async("again")).status == Status.INTERRUPTED  # main went on alone


async def test_fork_refuses_an_existing_target_and_an_unknown_snapshot() -> None:
    storage = InMemoryStorage()
    await chain(storage, "s", []).invoke_async("go")
    await fork_scope(storage, "s", "multiAgent", "chain", "copy")
    with pytest.raises(SessionError, match="already has"):
        await fork_scope(storage, "s", "multiAgent", "chain", "copy")
    with pytest.raises(SessionError, match="at snapshot"):
        await fork_scope(storage, "s", "multiAgent", "chain", "other", "0190a8f0-0000-7000-8000-000000000000")


async def test_export_then_import_resumes_without_rerunning_completed_nodes() -> None:
    storage = InMemoryStorage()
    calls: list[str] = []
    failed = await chain(storage, "s", calls, fail_at="b").invoke_async("go")
    assert failed.status == Status.FAILED
    data = await export_scope(storage, "s", "multiAgent", "chain")
    assert json.loads(data)["scope_id"] == "chain"

    elsewhere = InMemoryStorage()  # another machine
    assert await import_scope(elsewhere, data, "copy") == ("copy", "multiAgent", "chain")
    calls.clear()
    resumed = await chain(elsewhere, "copy", calls).invoke_async()
    assert resumed.status == Status.COMPLETED
    assert calls == ["b", "c"]
    assert resumed.output == "c done"


async def test_the_agent_snapshot_api_given_a_graph_says_what_to_use() -> None:
    storage = InMemoryStorage()
    graph = chain(storage, "s", [])
    await graph.invoke_async("go")
    with pytest.raises(SessionError, match="save_run_snapshot"):
        await graph.session_manager.save_snapshot(graph, is_latest=False)  # type: ignore[arg-type]


PIPELINE = """version: 1
kind: graph
id: chain
input: go
nodes:
  - {id: first, function: 'tests.support:spec_mark'}
  - {id: second, function: 'tests.support:fail_unless_allowed'}
edges:
  - {from: first, to: second}
"""


def test_cli_export_import_and_fork_round_trip(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yaml").write_text(PIPELINE)
    runner = CliRunner()
    assert runner.invoke(app, ["run", "p.yaml", "--session-id", "one"]).exit_code == 1
    exported = runner.invoke(
        app, ["sessions", "export", "one", "--scope", "multiAgent/chain", "-o", "run.json"]
    )
    assert exported.exit_code == 0, exported.output
    imported = runner.invoke(app, ["sessions", "import", "run.json", "--session-id", "two"])
    assert imported.exit_code == 0, imported.output
    assert "imported multiAgent/chain into session two" in imported.stdout
    forked = runner.invoke(app, ["sessions", "fork", "one", "--scope", "multiAgent/chain", "--to", "three"])
    assert forked.exit_code == 0, forked.output

    monkeypatch.setenv("ORCHESTRA_TEST_ALLOW", "1")
    for session_id in ("two", "three"):
        resumed = runner.invoke(app, ["resume", "p.yaml", "--session-id", session_id, "--json"])
        assert resumed.exit_code == 0, resumed.output
        data = json.loads(resumed.stdout)
        assert data["resumed"] is True
        assert data["execution_order"].count("first") == 1  # it ran once, in the original run
        assert data["output"] == "allowed"
    again = runner.invoke(app, ["sessions", "import", "run.json", "--session-id", "two"])
    assert again.exit_code == 1
    assert "already has" in again.stderr


async def test_keep_snapshots_bounds_the_immutable_history() -> None:
    from orchestra import Agent
    from orchestra.testing import ScriptedModel

    storage = InMemoryStorage()
    manager = SnapshotSessionManager("kept", storage=storage, keep_snapshots=2)
    agent = await Agent.create(model=ScriptedModel([f"r{i}" for i in range(5)]), session_manager=manager)
    taken = []
    for i in range(5):
        await agent.invoke_async(f"turn {i}")
        taken.append(await manager.save_snapshot(agent, is_latest=False))
    assert await manager.list_snapshot_ids(agent) == taken[-2:]
    await manager.restore_snapshot(agent, taken[-2])
    assert len(agent.messages) == 8


def test_cli_prune_snapshots(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    from orchestra.storage import LocalFileStorage

    async def make() -> Graph:
        graph = chain(LocalFileStorage(tmp_path / ".orchestra"), "pruned", [], multi_agent_snapshots="node")
        await graph.invoke_async("go")
        return graph

    import anyio

    anyio.run(make)
    runner = CliRunner()
    history = json.loads(
        runner.invoke(app, ["sessions", "history", "pruned", "--scope", "multiAgent/chain", "--json"]).stdout
    )
    assert len(history) == 3
    pruned = runner.invoke(app, ["sessions", "prune-snapshots", "pruned", "--keep-snapshots", "1"])
    assert pruned.exit_code == 0, pruned.output
    assert "deleted 2 immutable snapshot(s)" in pruned.stdout
    left = json.loads(
        runner.invoke(app, ["sessions", "history", "pruned", "--scope", "multiAgent/chain", "--json"]).stdout
    )
    assert [s["snapshot_id"] for s in left] == [history[-1]["snapshot_id"]]
    assert runner.invoke(app, ["sessions", "prune-snapshots", "pruned"]).exit_code == 2


async def test_importing_a_file_that_is_not_an_export_is_refused() -> None:
    from orchestra.errors import SnapshotError

    storage = InMemoryStorage()
    with pytest.raises(SnapshotError, match="the imported file: not valid JSON"):
        await import_scope(storage, b'{"scope": "multiAgent", "data":', "x")
    with pytest.raises(SnapshotError, match="names no scope id"):
        await import_scope(storage, b'{"scope": "multiAgent", "data": {}}', "x")
    assert await storage.list("session/") == []  # nothing was written


def test_cli_import_of_a_file_that_is_not_an_export_is_one_line(tmp_path: Any) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    result = CliRunner().invoke(app, ["sessions", "import", str(bad), "--storage", "memory"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: the imported file: not valid JSON")
