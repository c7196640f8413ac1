"""Orchestrator sessions: what a snapshot holds, the resume contract, incremental saves, topology checks."""

import json

import anyio
import pytest

from orchestra import Agent
from orchestra.errors import RunError, SessionConflictError, SnapshotError
from orchestra.multiagent import Graph, GraphBuilder, Status, Swarm
from orchestra.session import FileSessionManager, SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import InMemoryStorage
from orchestra.testing import CountingStorage, FunctionModel, ScriptedModel, ToolCall
from tests.journal_files import record_sizes

SCOPE = "session/s1/scopes/multiAgent/"


class Counter:
    def __init__(self):
        self.calls = {}

    def model(self, name, fail_first=False, reply=None):
        def fn(messages, specs):
            self.calls[name] = self.calls.get(name, 0) + 1
            if fail_first and self.calls[name] == 1:
                raise RuntimeError(f"{name} crashed")
            return reply or f"{name} output"

        return FunctionModel(fn)


def chain(counter, storage, n=5, fail_at=None, strategy="node", graph_id="pipeline"):
    builder = GraphBuilder().set_graph_id(graph_id)
    for i in range(n):
        builder.add_node(Agent(name=f"n{i}", model=counter.model(f"n{i}", fail_first=(i == fail_at))))
        if i:
            builder.add_edge(f"n{i - 1}", f"n{i}")
    builder.set_session_manager(
        SnapshotSessionManager("s1", storage=storage, multi_agent_save_latest_on=strategy)
    )
    return builder.build()


async def stored(storage, scope_id="pipeline"):
    return await Journal(storage, ScopeLayout("s1", "multiAgent", scope_id)).load()


async def test_the_snapshot_holds_status_nodes_agents_order_task_and_counters(storage):
    counter = Counter()
    graph = chain(counter, storage, n=3)
    await graph.invoke_async("the task")
    keys = await storage.list(SCOPE)
    assert f"{SCOPE}pipeline/snapshots/snapshot_latest.json" in keys
    doc = await stored(storage)
    assert doc.fields["run"]["status"] == "completed"
    assert doc.fields["run"]["execution_count"] == 3
    assert doc.fields["task"] == "the task"
    assert doc.fields["node/n1"]["status"] == "completed"
    assert doc.fields["node/n1"]["result"]["output"] == "n1 output"
    assert doc.logs["execution_order"] == ["n0", "n1", "n2"]
    assert doc.logs["agent/n2/messages"][-1]["content"][0]["text"] == "n2 output"
    assert set(doc.fields["agent/n2"]) == {
        "state",
        "conversation_manager_state",
        "system_prompt",
        "interrupt_state",
    }


async def test_a_failed_run_resumes_without_rerunning_completed_nodes_and_reports_completed(storage):
    counter = Counter()
    graph = chain(counter, storage, n=6, fail_at=3)
    first = await graph.invoke_async("task")
    assert first.status == Status.FAILED
    assert counter.calls == {"n0": 1, "n1": 1, "n2": 1, "n3": 1}
    # a new process: new objects over the same storage
    counter2 = Counter()
    counter2.calls = dict(counter.calls)
    again = chain(counter2, storage, n=6, fail_at=None)
    result = await again.invoke_async()
    assert result.status == Status.COMPLETED
    assert result.resumed
    assert counter2.calls == {"n0": 1, "n1": 1, "n2": 1, "n3": 2, "n4": 1, "n5": 1}
    # the order records every execution that finished, the failed attempt of n3 included
    assert result.execution_order == ["n0", "n1", "n2", "n3", "n3", "n4", "n5"]
    assert result.results["n0"].output == "n0 output"


async def test_a_completed_session_starts_a_fresh_run(storage):
    counter = Counter()
    graph = chain(counter, storage, n=2)
    await graph.invoke_async("one")
    fresh = chain(counter, storage, n=2)
    result = await fresh.invoke_async("two")
    assert not result.resumed
    assert counter.calls == {"n0": 2, "n1": 2}
    assert (await stored(storage)).fields["task"] == "two"


async def test_resuming_with_another_task_is_refused(storage):
    counter = Counter()
    await chain(counter, storage, n=3, fail_at=1).invoke_async("one")
    with pytest.raises(RunError, match="unfinished run .* of another task"):
        await chain(counter, storage, n=3).invoke_async("two")
    assert (await chain(counter, storage, n=3).invoke_async("one")).status == Status.COMPLETED


async def test_a_changed_graph_is_not_resumed_unless_forced(storage):
    counter = Counter()
    await chain(counter, storage, n=3, fail_at=2).invoke_async("task")
    changed = chain(counter, storage, n=4)
    with pytest.raises(RunError, match="different graph"):
        await changed.invoke_async()
    result = await chain(counter, storage, n=4).invoke_async(force_resume=True)
    assert result.status == Status.COMPLETED


async def test_invocation_strategy_saves_once_and_a_crash_restarts_the_invocation(storage):
    counter = Counter()
    counting = CountingStorage(storage)
    graph = chain(counter, counting, n=4, strategy="invocation")
    await graph.invoke_async("task")
    assert counting.writes <= 3  # record 0, snapshot_latest and manifest, all at the end
    per_node = CountingStorage(InMemoryStorage())
    await chain(Counter(), per_node, n=4, strategy="node").invoke_async("task")
    assert per_node.writes > counting.writes


async def test_per_node_saves_do_not_grow_with_completed_nodes(storage):
    graph = chain(Counter(), storage, n=60)
    await graph.invoke_async("task")
    sizes = await record_sizes(storage, f"{SCOPE}pipeline/journal/")  # (files, or a segment's lines)
    assert len(sizes) >= 60
    assert max(sizes[-10:-1]) <= max(sizes[2:12]) + 20


async def test_a_running_node_reruns_from_its_state_before_it_started(storage):
    counter = Counter()
    graph = chain(counter, storage, n=3, fail_at=1)
    graph.nodes["n1"].agent.state.set("note", "before")
    await graph.invoke_async("task")
    again = chain(Counter(), storage, n=3)
    await again.invoke_async()
    n1 = again.nodes["n1"].agent
    # one user message and one answer: the failed attempt left nothing behind
    assert [m["role"] for m in n1.messages] == ["user", "assistant"]


async def test_swarm_resumes_at_the_agent_that_held_the_task(storage):
    calls = []

    def agents(fail):
        def a(messages, specs):
            calls.append("a")
            return ToolCall("handoff_to_agent", {"agent_name": "b", "message": "yours", "context": {"k": 1}})

        def b(messages, specs):
            calls.append("b")
            if fail:
                raise RuntimeError("b is down")
            return "b answers"

        manager = SnapshotSessionManager("s1", storage=storage)
        return Swarm(
            [Agent(name="a", model=FunctionModel(a)), Agent(name="b", model=FunctionModel(b))],
            session_manager=manager,
        )

    first = await agents(True).invoke_async("task")
    assert first.status == Status.FAILED
    result = await agents(False).invoke_async()
    assert result.status == Status.COMPLETED
    assert calls == ["a", "b", "b"]
    assert result.shared_context == {"a": {"k": 1}}
    assert result.handoffs == [{"from": "a", "to": "b", "message": "yours"}]
    assert result.node_history == ["a", "b"]


async def test_nested_orchestrators_resume_inside(storage):
    calls = []

    def build(fail):
        def inner_b(messages, specs):
            calls.append("inner_b")
            if fail:
                raise RuntimeError("boom")
            return "inner b"

        def inner_a(messages, specs):
            calls.append("inner_a")
            return "inner a"

        inner = Graph(
            [Agent(name="ia", model=FunctionModel(inner_a)), Agent(name="ib", model=FunctionModel(inner_b))],
            edges=[("ia", "ib")],
            id="inner",
        )
        return Graph(
            {"inner": inner, "after": Agent(name="after", model=ScriptedModel(["done"]))},
            edges=[("inner", "after")],
            id="outer",
            session_manager=SnapshotSessionManager("s1", storage=storage),
        )

    assert (await build(True).invoke_async("t")).status == Status.FAILED
    result = await build(False).invoke_async()
    assert result.status == Status.COMPLETED
    assert calls == ["inner_a", "inner_b", "inner_b"]
    assert f"{SCOPE}outer.inner/snapshots/snapshot_latest.json" in await storage.list(SCOPE)


def test_repository_managers_persist_orchestrators(tmp_path):
    counter = Counter()

    def build(fail_at):
        builder = GraphBuilder().set_graph_id("pipe")
        for i in range(3):
            builder.add_node(Agent(name=f"n{i}", model=counter.model(f"n{i}", fail_first=(i == fail_at))))
            if i:
                builder.add_edge(f"n{i - 1}", f"n{i}")
        return builder.set_session_manager(FileSessionManager("s1", storage_dir=str(tmp_path))).build()

    assert build(1)("task").status == Status.FAILED
    stored_state = json.loads(
        (tmp_path / "session_s1/multi_agents/multi_agent_pipe/multi_agent.json").read_text()
    )
    assert stored_state["run"]["status"] == "failed"
    assert build(None)().status == Status.COMPLETED
    assert counter.calls == {"n0": 1, "n1": 2, "n2": 1}


def test_repository_managers_resume_a_task_with_binary_content(tmp_path):
    """An image in the task survives the repository layout's multi_agent.json (it used to become a repr)."""
    png = b"\x89PNG\r\n\x1a\n\x00\xff"
    seen = []

    def build(fail):
        def second(messages, specs):
            seen.append(messages[0]["content"])
            if fail:
                raise RuntimeError("second crashed")
            return "done"

        return Graph(
            [
                Agent(name="first", model=ScriptedModel(["looked"])),
                Agent(name="second", model=FunctionModel(second)),
            ],
            edges=[("first", "second")],
            id="pipe",
            session_manager=FileSessionManager("s1", storage_dir=str(tmp_path)),
        )

    task = [{"text": "describe"}, {"image": {"format": "png", "source": {"bytes": png}}}]
    assert build(True)(task).status == Status.FAILED
    assert build(False)().status == Status.COMPLETED
    images = [block for content in seen for block in content if "image" in block]
    assert [image["image"]["source"]["bytes"] for image in images] == [png, png]


async def test_repository_managers_refuse_a_second_writer_of_an_orchestrator(tmp_path):
    """Two live runs of one graph in one session: the one that saves second is refused, not merged."""
    both_started = anyio.Event()
    started = []

    async def slow(messages, specs):
        started.append(1)
        if len(started) == 2:
            both_started.set()
        await both_started.wait()
        return "out"

    def build():
        return Graph(
            [Agent(name="only", model=FunctionModel(slow))],
            id="pipe",
            session_manager=FileSessionManager("s1", storage_dir=str(tmp_path)),
        )

    outcomes = []

    async def run(graph):
        try:
            outcomes.append((await graph.invoke_async("go")).status)
        except SessionConflictError as exc:
            outcomes.append(str(exc))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, build())
        tg.start_soon(run, build())
    assert Status.COMPLETED in outcomes
    conflicts = [o for o in outcomes if not isinstance(o, Status)]
    assert len(conflicts) == 1
    assert "multi_agent_pipe/multi_agent.json" in conflicts[0]


def test_repository_managers_name_a_truncated_multi_agent_file(tmp_path):
    graph = Graph(
        [Agent(name="only", model=ScriptedModel(["one"]))],
        id="pipe",
        session_manager=FileSessionManager("s1", storage_dir=str(tmp_path)),
    )
    graph("go")
    path = tmp_path / "session_s1/multi_agents/multi_agent_pipe/multi_agent.json"
    path.write_text(path.read_text()[:50])
    again = Graph(
        [Agent(name="only", model=ScriptedModel([]))],
        id="pipe",
        session_manager=FileSessionManager("s1", storage_dir=str(tmp_path)),
    )
    with pytest.raises(SnapshotError, match="multi_agent_pipe/multi_agent.json: not valid JSON"):
        again("go")
