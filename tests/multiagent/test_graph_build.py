"""Graph construction and build-time validation: every error names the nodes involved."""

import pytest

from orchestra import Agent
from orchestra.errors import GraphError
from orchestra.multiagent import Graph, GraphBuilder, Swarm
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import ScriptedModel


def agent(name):
    return Agent(name=name, model=ScriptedModel([f"{name} done"]))


def step(node_input):
    return "stepped"


def test_builder_and_constructor_build_the_same_graph():
    a, b = agent("a"), agent("b")
    built = (
        GraphBuilder()
        .add_node(a)
        .add_node(b)
        .add_edge("a", "b")
        .set_entry_point("a")
        .set_graph_id("g")
        .build()
    )
    direct = Graph(nodes={"a": agent("a"), "b": agent("b")}, edges=[("a", "b")], entry_points=["a"], id="g")
    assert list(built.nodes) == list(direct.nodes) == ["a", "b"]
    assert built.topology_hash() == direct.topology_hash()
    assert built.entry_points == ["a"]


def test_default_ids_and_entry_points():
    graph = Graph([agent("researcher"), step], edges=[("researcher", "step")])
    assert list(graph.nodes) == ["researcher", "step"]
    assert graph.entry_points == ["researcher"]
    assert graph.nodes["step"].kind == "function"


def test_graph_error_is_a_value_error():
    assert issubclass(GraphError, ValueError)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Graph({"a": agent("a")}, edges=[("a", "writter")]),
            r"edge a -> writter: unknown node 'writter'",
        ),
        (lambda: Graph({"a": agent("a")}, edges=[("ghost", "a")]), r"edge ghost -> a: unknown node 'ghost'"),
        (
            lambda: GraphBuilder().add_node(agent("a"), "x").add_node(agent("b"), "x"),
            r"duplicate node id 'x'",
        ),
        (lambda: Graph([("x", agent("a")), ("x", agent("b"))]), r"duplicate node id 'x'"),
        (
            lambda: (lambda same: Graph({"one": same, "two": same}))(agent("a")),
            r"the same executor was added twice, as 'one' and 'two'",
        ),
        (
            lambda: Graph(
                {"a": agent("a"), "b": agent("b")}, edges=[("a", "b"), ("b", "a")], max_node_executions=5
            ),
            r"no entry point",
        ),
        (
            lambda: Graph(
                {"a": agent("a"), "b": agent("b"), "c": agent("c")}, edges=[("a", "b")], entry_points=["a"]
            ),
            r"unreachable from every entry point \(a\): c",
        ),
        (
            lambda: Graph(
                {"a": agent("a"), "w": agent("w"), "r": agent("r")},
                edges=[("a", "w"), ("w", "r"), ("r", "w")],
            ),
            r"cycle with no bound: (w -> r -> w|r -> w -> r)",
        ),
        (lambda: Graph({"a": agent("a")}, entry_points=["nope"]), r"entry point 'nope' is not a node"),
        (lambda: Graph({"a": 42}), r"node 'a': 42 is not a node"),
        (lambda: Graph({}), r"at least one node"),
        (lambda: Graph({"a": agent("a")}, joins={"zz": "any"}), r"joins names unknown node\(s\): zz"),
        (lambda: Graph({"a": agent("a")}, max_concurrency=0), r"max_concurrency must be positive"),
        (
            lambda: Graph({"a": agent("a"), "b": agent("b")}, edges=[("a", "b", "yes")]),
            r"condition 'yes' is not callable",
        ),
    ],
)
def test_validation_errors(build, message):
    with pytest.raises(GraphError, match=message):
        build()


def test_bounded_cycles_are_accepted():
    nodes = {"a": agent("a"), "w": agent("w"), "r": agent("r")}
    edges = [("a", "w"), ("w", "r"), ("r", "w", lambda s: False)]
    assert Graph(dict(nodes), edges, max_node_executions=10)
    assert Graph({k: agent(k) for k in nodes}, edges, execution_timeout=5)


def with_session(name):
    return Agent(name=name, session_manager=SnapshotSessionManager("s", storage=InMemoryStorage()))


@pytest.mark.parametrize(
    "build",
    [
        lambda: GraphBuilder().add_node(with_session("rogue")),
        lambda: Graph({"rogue": with_session("rogue")}),
        lambda: Graph({"outer": Graph({"inner": with_session("rogue")})}),
        lambda: Swarm([with_session("rogue")]),
    ],
    ids=["builder", "constructor", "nested", "swarm"],
)
def test_an_agent_with_its_own_session_manager_is_refused(build):
    with pytest.raises(ValueError, match=r"agent 'rogue' .*only the orchestrator may own a session manager"):
        build()


def test_a_nested_orchestrator_with_its_own_session_manager_is_refused():
    inner = Graph(
        {"a": agent("a")}, id="inner", session_manager=SnapshotSessionManager("s", storage=InMemoryStorage())
    )
    with pytest.raises(GraphError, match=r"nested Graph 'inner' .* has its own session manager"):
        Graph({"inner": inner})


def test_swarm_validation():
    with pytest.raises(GraphError, match="at least one agent"):
        Swarm([])
    with pytest.raises(GraphError, match="duplicate node id 'a'"):
        Swarm([agent("a"), agent("a")])
    same = agent("x")
    with pytest.raises(GraphError, match="added twice"):
        Swarm([same, same])
    with pytest.raises(GraphError, match="entry point 'zz'"):
        Swarm([agent("a")], entry_point="zz")
    with pytest.raises(GraphError, match="max_handoffs must be at least 1"):
        Swarm([agent("a")], max_handoffs=0)


async def test_a_copy_for_a_run_shares_the_structure_and_nothing_of_the_run():
    """What a Temporal worker runs a function node on: the nodes, edges and conditions are the built
    graph's, the run document, the shared state and the locks are the copy's own."""

    def count(node_input):
        node_input.state.set("count", (node_input.state.get("count") or 0) + 1)
        return node_input.state.get("count")

    built = Graph({"a": count, "b": count}, [("a", "b")], state={"count": 0})
    copy = built.copy_for_run()
    assert copy.nodes == built.nodes
    assert copy.nodes is not built.nodes
    assert copy.edges is built.edges
    assert copy.session_manager is None

    result = await copy.invoke_async("go")
    assert result.status.value == "completed"
    assert copy.state.get("count") == 2
    assert built.state.get("count") == 0  # the built graph's run is untouched
    assert built.run["status"] == "pending"
    assert list(built.document.log("execution_order")) == []
    assert copy.state is not built.state
    assert copy.sync_nodes is not built.sync_nodes

    again = built.copy_for_run()  # a second copy starts from the spec's state, not the first copy's
    assert (await again.invoke_async("go")).output == 2


async def test_shared_node_records_are_copied_before_the_first_change():
    """A document loaded with shared_records stays the caller's: the orchestrator copies a node's record
    the first time it changes it, and leaves every other record (nested dicts included) as it was."""

    def step(node_input):
        return node_input.node_id

    source = Graph({"a": step, "b": step}, [("a", "b")], id="shared")
    await source.invoke_async("go")
    fields = {name: source.document.field(name) for name in source.document.names()}
    logs = {"execution_order": list(source.document.log("execution_order"))}
    before = {name: repr(value) for name, value in fields.items()}

    graph = Graph({"a": step, "b": step}, [("a", "b")], id="shared")
    graph.document.load(fields, logs, shared_records=True)
    assert graph.document.node("a") is fields["node/a"]  # nothing copied up front
    graph.document.update_node("a", status="executing", executions=2)
    graph.scheduler().apply_edges("a", {"b": False})  # changes b's incoming edges in place

    assert graph.document.node("a")["status"] == "executing"
    assert graph.document.node("b")["incoming"] == {"a": "skipped"}
    assert {name: repr(value) for name, value in fields.items()} == before
