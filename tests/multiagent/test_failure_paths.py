"""The ways a Graph or Swarm run stops short of completing, and what each must leave behind."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from contextlib import aclosing
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra import Agent
from orchestra.errors import MultipleNodeErrors, RunError, SessionConflictError
from orchestra.multiagent import Graph, NodeInput, Status, Swarm
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import ScriptedModel, ToolCall

# -- interrupts ----------------------------------------------------------------------------------------


def ask(name: str) -> Any:
    def node(node_input: NodeInput) -> str:
        return f"{name}: {node_input.interrupt(name, reason=f'approve {name}?')}"

    node.__name__ = name
    return node


def two_questions(storage: InMemoryStorage) -> Graph:
    return Graph(
        {"a": ask("a"), "b": ask("b"), "join": lambda i: " + ".join(sorted(i.inputs.values()))},
        edges=[("a", "join"), ("b", "join")],
        session_manager=SnapshotSessionManager("hitl", storage=storage),
    )


async def test_interrupts_are_answered_one_at_a_time_in_any_order_across_processes() -> None:
    storage = InMemoryStorage()
    first = await two_questions(storage).invoke_async("go")
    assert first.status == Status.INTERRUPTED
    ids = {i.name: i.id for i in first.interrupts}
    assert set(ids) == {"a", "b"}

    # A resume without answers keeps the run interrupted with both questions.
    again = await two_questions(storage).invoke_async()
    assert again.status == Status.INTERRUPTED
    assert {i.name for i in again.interrupts} == {"a", "b"}
    assert again.output is None

    # Answer b only, in another "process": a stays open.
    partly = await two_questions(storage).invoke_async(
        [{"interruptResponse": {"interruptId": ids["b"], "response": "yes"}}]
    )
    assert partly.status == Status.INTERRUPTED
    assert [i.name for i in partly.interrupts] == ["a"]

    done = await two_questions(storage).invoke_async(
        [{"interruptResponse": {"interruptId": ids["a"], "response": "ok"}}]
    )
    assert done.status == Status.COMPLETED
    assert done.output == "a: ok + b: yes"


async def test_an_unknown_interrupt_id_is_refused_and_changes_nothing() -> None:
    storage = InMemoryStorage()
    first = await two_questions(storage).invoke_async("go")
    with pytest.raises(RunError, match="no open interrupt 'nope'"):
        await two_questions(storage).invoke_async(
            [{"interruptResponse": {"interruptId": "nope", "response": 1}}]
        )
    still = await two_questions(storage).invoke_async()
    assert {i.id for i in still.interrupts} == {i.id for i in first.interrupts}


APPROVAL = """version: 1
kind: graph
id: approval
input: go
nodes:
  - {id: first, function: 'tests.support:ask_human'}
"""


def cli(*args: str, cwd: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from orchestra.cli import main; main()", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_resume_without_answers_keeps_the_questions_open(tmp_path: Any) -> None:
    (tmp_path / "approval.yaml").write_text(APPROVAL)
    run = cli("run", "approval.yaml", "--session-id", "s1", cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    interrupt_id = next(w for w in run.stderr.split() if w.startswith("int-"))
    bare = cli("resume", "approval.yaml", "--session-id", "s1", cwd=tmp_path)
    assert bare.returncode == 3, bare.stderr
    assert interrupt_id in bare.stderr
    assert bare.stdout.strip() == ""  # an unfinished run has no output
    answered = cli(
        "resume", "approval.yaml", "--session-id", "s1", "--respond", f'{interrupt_id}="yes"', cwd=tmp_path
    )
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == "human said yes"


# -- output --------------------------------------------------------------------------------------------


async def slow_p(node_input: NodeInput) -> str:
    await anyio.sleep(0.05)
    return "P's intermediate text"


async def test_the_output_is_the_terminal_nodes_not_the_last_to_finish() -> None:
    graph = Graph(
        {"S": lambda i: "s", "P": slow_p, "Q": lambda i: "q", "J": lambda i: "final answer"},
        edges=[("S", "P"), ("S", "Q"), ("P", "J"), ("Q", "J")],
        joins={"J": "any"},
    )
    result = await graph.invoke_async("task")
    assert result.execution_order[-1] == "P"  # P finished last...
    assert result.output == "final answer"  # ...but J is the terminal node
    assert str(result) == "final answer"
    assert result.results["P"].output == "P's intermediate text"


async def test_several_terminals_give_an_output_per_terminal_and_a_failed_run_none() -> None:
    graph = Graph(
        {"S": lambda i: "s", "A": lambda i: "a", "B": lambda i: [1]}, edges=[("S", "A"), ("S", "B")]
    )
    result = await graph.invoke_async("task")
    assert result.output == {"A": "a", "B": [1]}

    def boom(node_input: NodeInput) -> str:
        raise ValueError("broken")

    failed = await Graph({"S": lambda i: "s", "X": boom}, edges=[("S", "X")]).invoke_async("task")
    assert failed.status == Status.FAILED
    assert failed.output is None
    assert failed.results["S"].output == "s"


# -- streams -------------------------------------------------------------------------------------------


def chain(storage: InMemoryStorage, calls: list[str]) -> Graph:
    async def step(node_input: NodeInput) -> str:
        calls.append(node_input.node_id)
        await anyio.lowlevel.checkpoint()
        return f"{node_input.node_id} done"

    return Graph(
        dict.fromkeys("abcd", step),
        edges=[("a", "b"), ("b", "c"), ("c", "d")],
        session_manager=SnapshotSessionManager("stream", storage=storage),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=12))
def test_a_graph_stream_closed_at_any_point_is_saved_resumable(stop_after: int) -> None:
    async def scenario() -> None:
        storage = InMemoryStorage()
        calls: list[str] = []
        seen = 0
        async with aclosing(chain(storage, calls).stream_async("go")) as events:
            async for _ in events:
                seen += 1
                if seen > stop_after:
                    break
        saved = await SnapshotSessionManager("stream", storage=storage).journal("multiAgent", "graph").load()
        assert saved is not None
        if saved.fields["run"]["status"] == "completed":  # closed after the run had already completed
            assert calls == ["a", "b", "c", "d"]
            return
        assert saved.fields["run"]["status"] == "interrupted"
        resumed = await chain(storage, calls).invoke_async()  # a new process resumes what is left
        assert resumed.resumed
        assert resumed.output == "d done"
        # Completed nodes never run again; only the node running when the stream closed may.
        assert sorted(set(calls)) == ["a", "b", "c", "d"]
        assert len(calls) <= 5, calls

    anyio.run(scenario)


async def test_a_swarm_stream_closed_early_is_saved_resumable() -> None:
    storage = InMemoryStorage()

    def swarm() -> Swarm:
        triage = Agent(
            name="triage",
            model=ScriptedModel([ToolCall("handoff_to_agent", {"agent_name": "expert", "message": "yours"})]),
        )
        expert = Agent(name="expert", model=ScriptedModel(["solved"]))
        return Swarm([triage, expert], session_manager=SnapshotSessionManager("sw", storage=storage))

    async with aclosing(swarm().stream_async("help")) as events:
        async for _ in events:
            break
    result = await swarm().invoke_async()
    assert result.status == Status.COMPLETED
    assert result.output == "solved"


# -- errors surface as themselves ----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["invoke", "stream"])
async def test_a_second_writer_raises_session_conflict_error_itself(how: str) -> None:
    storage = InMemoryStorage()

    async def slow(node_input: NodeInput) -> str:
        await anyio.sleep(0.02)
        return node_input.node_id

    def graph() -> Graph:
        return Graph(
            {"a": slow, "b": slow, "c": slow},
            edges=[("a", "b"), ("a", "c")],
            session_manager=SnapshotSessionManager("two", storage=storage),
        )

    outcomes: list[BaseException | None] = []

    async def run(g: Graph) -> None:
        try:
            if how == "invoke":
                await g.invoke_async("task")
            else:
                async with aclosing(g.stream_async("task")) as events:
                    async for _ in events:
                        pass
            outcomes.append(None)
        except BaseException as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(run, graph())
        group.start_soon(run, graph())
    errors = [e for e in outcomes if e is not None]
    assert len(errors) == 1, outcomes
    assert type(errors[0]) is SessionConflictError  # not an ExceptionGroup around it


def test_several_errors_at_once_are_one_documented_error() -> None:
    error = MultipleNodeErrors([ValueError("x"), KeyError("y")])
    assert isinstance(error, RunError)
    assert [type(e) for e in error.errors] == [ValueError, KeyError]
    assert "2 errors at once" in str(error)


# -- force_resume and the topology hash ----------------------------------------------------------------


def fail_once(flag: dict[str, bool]) -> Any:
    def node(node_input: NodeInput) -> str:
        if not flag.get("allowed"):
            raise RuntimeError("not yet")
        return "inner done"

    return node


async def test_force_resume_reaches_a_changed_nested_graph() -> None:
    storage = InMemoryStorage()
    flag: dict[str, bool] = {}

    def outer(extra_inner_node: bool) -> Graph:
        nodes: dict[str, Any] = {"x": fail_once(flag)}
        if extra_inner_node:
            nodes["y"] = lambda i: "y"
        inner = Graph(nodes, id="inner")
        return Graph(
            {"start": lambda i: "s", "inner": inner},
            edges=[("start", "inner")],
            id="outer",
            session_manager=SnapshotSessionManager("nested", storage=storage),
        )

    assert (await outer(False).invoke_async("go")).status == Status.FAILED
    flag["allowed"] = True
    refused = await outer(True).invoke_async()
    assert refused.status == Status.FAILED
    assert "force_resume" in str(refused.reason)
    result = await outer(True).invoke_async(force_resume=True)
    assert result.status == Status.COMPLETED


def test_the_topology_hash_covers_join_modes_and_conditions() -> None:
    def when_yes(state: Any) -> bool:
        return True

    def when_no(state: Any) -> bool:
        return False

    def graph(join: str = "all", condition: Any = None) -> Graph:
        return Graph(
            {"a": lambda i: "a", "b": lambda i: "b", "c": lambda i: "c"},
            edges=[("a", "c"), ("b", "c", condition) if condition else ("b", "c")],
            joins={"c": join},  # type: ignore[dict-item]
        )

    base = graph().topology_hash()
    assert graph(join="any").topology_hash() != base
    assert graph(condition=when_yes).topology_hash() != base
    assert graph(condition=when_yes).topology_hash() != graph(condition=when_no).topology_hash()
    assert graph(condition=when_yes).topology_hash() == graph(condition=when_yes).topology_hash()
    skeleton = Graph.from_structure(graph(condition=when_yes).structure())
    assert skeleton.topology_hash() == graph(condition=when_yes).topology_hash()


# -- without a session manager -------------------------------------------------------------------------


def test_without_a_session_manager_every_task_starts_a_fresh_run() -> None:
    seen: list[str] = []

    def work(node_input: NodeInput) -> str:
        seen.append(node_input.task)
        if node_input.task == "bad":
            raise ValueError("bad task")
        return f"did {node_input.task}"

    graph = Graph({"work": work})
    results = [graph(task) for task in ["one", "bad", "two"]]
    assert [r.status for r in results] == [Status.COMPLETED, Status.FAILED, Status.COMPLETED]
    assert results[2].output == "did two"
    assert seen == ["one", "bad", "two"]


def failed_once_graph() -> Graph:
    """A graph (no session manager) whose second node failed in its first run and succeeds after."""
    attempts: list[int] = []

    def flaky(node_input: NodeInput) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("first time fails")
        return "ok"

    graph = Graph({"first": lambda i: "first", "flaky": flaky}, edges=[("first", "flaky")])
    assert graph("task").status == Status.FAILED
    return graph


def test_without_a_session_manager_a_call_without_task_resumes_in_memory() -> None:
    graph = failed_once_graph()
    resumed = graph()
    assert resumed.status == Status.COMPLETED
    assert resumed.resumed


# -- sync function nodes -------------------------------------------------------------------------------


def test_node_timeout_bounds_a_sync_function_node() -> None:
    finished = threading.Event()

    def slow(node_input: NodeInput) -> str:
        finished.wait(2)
        return "late"

    result = Graph({"slow": slow}, node_timeout=0.2)("task")
    assert result.status == Status.FAILED
    assert "node_timeout (0.2s) exceeded" in str(result.reason)
    assert not finished.is_set()  # the call returned while the thread still ran
    finished.set()


def test_parallel_sync_function_nodes_never_lose_shared_state_updates() -> None:
    def count(node_input: NodeInput) -> str:
        for _ in range(2000):
            node_input.state.set("n", (node_input.state.get("n") or 0) + 1)
        return "counted"

    graph = Graph(
        {"start": lambda i: "go", **{f"w{k}": count for k in range(4)}},
        edges=[("start", f"w{k}") for k in range(4)],
    )
    result = graph("task")
    assert result.status == Status.COMPLETED
    assert graph.state.get("n") == 8000


def test_a_run_saved_with_the_older_topology_hash_still_resumes() -> None:
    graph = failed_once_graph()
    graph.run["topology"] = graph._legacy_topology_hash()  # as a version before this one saved it
    assert graph().status == Status.COMPLETED
    graph.run.update(status="failed", topology="0123456789abcdef")
    with pytest.raises(RunError, match="force_resume"):
        graph()
