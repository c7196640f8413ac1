"""Map nodes: a fan-out over a list known at run time, each item saved on its own."""

import anyio
import pytest

from orchestra import Agent, load, tool
from orchestra.errors import GraphError
from orchestra.multiagent import Graph, Map, MapItemEvent, RetryPolicy
from orchestra.multiagent.events import AfterNodeCall
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel


def numbers(node_input):
    return [1, 2, 3, 4, 5, 6]


def double(node_input):
    return node_input.item * 2


def summed(node_input):
    return sum(node_input.inputs["each"])


def test_a_map_runs_one_instance_per_item_and_joins_their_outputs_in_item_order():
    graph = Graph(
        {"split": numbers, "each": Map(double), "total": summed}, [("split", "each"), ("each", "total")]
    )
    result = graph("go")
    assert result.status.value == "completed"
    assert result.results["each"].output == [2, 4, 6, 8, 10, 12]
    assert result.output == 42
    assert not graph.document.names("map/")


async def test_max_concurrency_bounds_how_many_items_run_at_once():
    running, most = 0, 0

    async def item(node_input):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await anyio.sleep(0.01 * (6 - node_input.index))  # later items finish first
        running -= 1
        return node_input.index

    graph = Graph({"split": numbers, "each": Map(item, max_concurrency=2)}, [("split", "each")])
    result = await graph.invoke_async("go")
    assert most == 2
    assert result.output == [0, 1, 2, 3, 4, 5]  # item order, not completion order


def test_over_takes_a_node_a_field_the_state_or_a_function():
    def report(node_input):
        return {"rows": [{"n": 1}, {"n": 2}], "title": "t"}

    def rows(node_input):
        return node_input.item["n"] * 10

    graph = Graph(
        {
            "report": report,
            "by_field": Map(rows, over="report.rows"),
            "by_state": Map(double, over="state.todo"),
        },
        [("report", "by_field"), ("report", "by_state")],
        state={"todo": [5, 6]},
    )
    result = graph("go")
    assert result.output == {"by_field": [10, 20], "by_state": [10, 12]}
    by_function = Graph({"each": Map(double, over=lambda node_input: [len(node_input.task)])})
    assert by_function("four").output == [8]


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ("nowhere", r"over='nowhere' names no node and is not state.<key>"),
        ("split.missing", r"over='split.missing': there is no field 'missing'"),
        ("split", r"map node 'each': over='split' is a str, not a list"),
    ],
)
def test_a_map_without_a_list_fails_naming_where_it_looked(over, message):
    graph = Graph({"split": lambda: "not a list", "each": Map(double, over=over)}, [("split", "each")])
    result = graph("go")
    assert result.status.value == "failed"
    assert result.results["each"].error is not None
    import re

    assert re.search(message, result.reason), result.reason


def test_join_first_k_and_until_stop_the_remaining_items():
    async def slow(node_input):
        await anyio.sleep(0.01 + 0.05 * node_input.index)
        return node_input.item

    first = Graph({"split": numbers, "each": Map(slow, join=2)}, [("split", "each")])
    assert first("go").output == [1, 2]

    def over_three(items):
        return any(item.output > 3 for item in items)

    until = Graph({"split": numbers, "each": Map(slow, join=over_three)}, [("split", "each")])
    assert until("go").output == [1, 2, 3, 4]


def test_nested_maps_fan_out_over_lists_of_lists():
    graph = Graph({"split": lambda: [[1, 2], [], [3]], "each": Map(Map(double))}, [("split", "each")])
    assert graph("go").output == [[2, 4], [], [6]]


def test_agent_items_are_fresh_copies_prompted_with_their_item():
    def reply(messages, specs):
        assert len(messages) == 1  # a fresh conversation per item
        return messages[-1]["content"][-1]["text"].rsplit("\n", 1)[-1].upper()

    template = Agent(name="reader", system_prompt="Shout the item.", model=FunctionModel(reply))
    graph = Graph({"split": lambda: ["a", "b", "c"], "each": Map(template)}, [("split", "each")])
    result = graph("task")
    assert result.output == ["A", "B", "C"]
    assert template.messages == []
    assert "Item 2 of 3:\nb" in template.model.requests[1].messages[-1]["content"][-1]["text"]


def test_a_factory_gives_each_item_its_own_nested_graph():
    def build():
        return Graph(
            {"inner": lambda node_input: f"inner saw {node_input.task.rsplit(chr(10), 1)[-1]}"}, id="inner"
        )

    graph = Graph({"split": lambda: ["x", "y"], "each": Map(factory=build)}, [("split", "each")])
    assert graph("go").output == ["inner saw x", "inner saw y"]
    with pytest.raises(GraphError, match="pass factory="):
        Map(build())


def test_each_item_is_saved_on_its_own_and_a_resume_runs_only_the_missing_ones():
    ran = []

    def item(node_input):
        ran.append(node_input.index)
        if node_input.index == 4 and ran.count(4) == 1:
            raise RuntimeError("item 4 broke")
        return node_input.item

    saves = []

    class Count:
        def register_hooks(self, registry):
            registry.add_callback(AfterNodeCall, lambda e: saves.append((e.node_id, e.partial)))

    store = InMemoryStorage()
    graph = Graph(
        {"split": numbers, "each": Map(item, max_concurrency=1)},
        [("split", "each")],
        hooks=[Count()],
        session_manager=SnapshotSessionManager("s", storage=store),
    )
    failed = graph("go")
    assert failed.status.value == "failed"
    assert failed.reason == "node 'each' failed: item 4 failed: RuntimeError: item 4 broke"
    assert ("each", True) in saves  # saves in the middle of the node: the list, then each item
    assert saves.count(("each", True)) == 1 + 5  # the list, then items 0-3 and the failed 4
    resumed = Graph(
        {"split": numbers, "each": Map(item, max_concurrency=1)},
        [("split", "each")],
        session_manager=SnapshotSessionManager("s", storage=store),
    )
    result = resumed()
    assert result.status.value == "completed"
    assert result.output == numbers(None)
    assert ran == [0, 1, 2, 3, 4, 4, 5]  # the resume ran the failed item and the missing one


async def test_items_report_their_progress_in_the_stream():
    graph = Graph({"split": numbers, "each": Map(double, max_concurrency=1)}, [("split", "each")])
    events = [e async for e in graph.stream_async("go") if isinstance(e, MapItemEvent)]
    assert [(e.index, e.status, e.done, e.count) for e in events] == [
        (i, "completed", i + 1, 6) for i in range(6)
    ]


def test_an_item_has_the_node_retry_policy_and_its_attempts_are_recorded():
    attempts = []

    def flaky(node_input):
        attempts.append((node_input.index, node_input.attempt))
        if node_input.index == 1 and node_input.attempt < 3:
            raise ConnectionError("flaky backend")
        return node_input.item

    policy = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0, retry_on=(ConnectionError,))
    graph = Graph(
        {"split": lambda: [10, 20], "each": Map(flaky)}, [("split", "each")], retry={"each": policy}
    )
    assert graph("go").output == [10, 20]
    assert sorted(attempts) == [(0, 1), (1, 1), (1, 2), (1, 3)]


def test_the_yaml_map_is_the_python_one(tmp_path):
    (tmp_path / "fan.yaml").write_text(
        """
version: 1
kind: graph
id: fan
agents:
  - name: reader
    model: {provider: function, function: 'tests.support:reply_fn'}
nodes:
  - {id: split, function: 'tests.orchestration_steps:split'}
  - id: each
    map: {node: 'tests.orchestration_steps:slow_item', max_concurrency: 3, join: {first: 4}}
  - id: read
    map: {over: split, node: reader}
  - id: nested
    map: {over: split, node: {graph: {version: 1, kind: graph, id: inner, nodes: [{id: x, function: 'tests.orchestration_steps:mark'}]}}}
edges:
  - {from: split, to: each}
  - {from: split, to: read}
  - {from: split, to: nested}
"""
    )
    graph = load(tmp_path / "fan.yaml")
    assert [graph.nodes[n].kind for n in ("each", "read", "nested")] == ["map", "map", "map"]
    assert graph.nodes["read"].executor.template_kind == "agent"
    assert graph.nodes["nested"].executor.template_kind == "factory"
    result = graph("go")
    assert result.status.value == "completed", result.reason
    assert len(result.results["each"].output) == 4
    assert result.results["read"].output == ["from a function"] * 12
    assert result.results["nested"].output == ["x done"] * 12


def test_a_map_item_agent_with_side_effecting_tools_is_refused_before_anything_runs():
    # A retried or resumed item starts its turn over (it keeps no open turn): its effects could run twice.
    sent: list[str] = []

    @tool(effects=True)
    def send(to: str) -> str:
        """Send a message.

        Args:
            to: who to send it to.
        """
        sent.append(to)
        return "sent"

    def mailer() -> Agent:
        return Agent(name="mailer", model=FunctionModel(lambda messages, specs: "ok"), tools=[send])

    with pytest.raises(GraphError, match=r"side-effecting tools \(send\)"):
        Map(mailer())
    graph = Graph({"split": lambda: ["x", "y"], "each": Map(factory=mailer)}, [("split", "each")])
    result = graph("go")
    assert result.status.value == "failed"
    assert "side-effecting tools (send)" in str(result.results["each"].error)
    assert sent == []
