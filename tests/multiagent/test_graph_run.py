"""Running graphs: inputs, conditions, joins, per-node scheduling, concurrency, limits, failures, loops."""

import time

import anyio
import anyio.lowlevel

from orchestra import Agent, ToolContext, tool
from orchestra.multiagent import (
    AfterNodeCall,
    BeforeNodeCall,
    Graph,
    GraphBuilder,
    MultiAgentResultEvent,
    NodeStartEvent,
    NodeStopEvent,
    NodeStreamEvent,
    Status,
    Swarm,
)
from orchestra.testing import FunctionModel, ScriptedModel, ToolCall, collect


def agent(name, *replies, latency=0.0):
    return Agent(name=name, model=ScriptedModel(list(replies) or [f"{name} done"], latency=latency))


def echo_agent(name, latency=0.0):
    """Answers with its name and the text it received (so tests can see node inputs)."""
    return Agent(
        name=name,
        model=FunctionModel(
            lambda messages, specs: f"[{name}] saw: {messages[-1]['content'][-1]['text']}", latency=latency
        ),
    )


def test_chain_passes_the_task_and_predecessor_outputs():
    graph = Graph([agent("research", "facts"), echo_agent("write")], edges=[("research", "write")])
    result = graph("Write about AI")
    assert result.status == Status.COMPLETED
    assert result.execution_order == ["research", "write"]
    assert result.results["write"].output == (
        "[write] saw: Write about AI\n\nInputs from earlier nodes:\n\nFrom research:\nfacts"
    )
    assert str(result) == result.results["write"].output
    assert result.completed_nodes == 2
    assert result.total_nodes == 2


def test_function_nodes_sync_and_async_mixed_with_agents():
    def count_words(node_input):
        return {"words": len(node_input.inputs["draft"].split())}

    async def shout(node_input):
        await anyio.lowlevel.checkpoint()
        return node_input.task.upper()

    graph = Graph(
        {
            "draft": agent("draft", "one two three"),
            "count": count_words,
            "shout": shout,
            "report": echo_agent("report"),
        },
        edges=[("draft", "count"), ("count", "report"), ("shout", "report")],
    )
    result = graph("go")
    assert result.results["count"].output == {"words": 3}
    assert result.results["shout"].output == "GO"
    assert '"words": 3' in result.results["report"].output
    assert "From shout:\nGO" in result.results["report"].output


def test_a_function_node_returning_non_json_fails_clearly():
    graph = Graph({"bad": lambda node_input: object()})
    result = graph("x")
    assert result.status == Status.FAILED
    assert "returned a object, which is not JSON" in result.error


def test_conditions_see_the_state_and_the_invocation_state():
    seen = {}

    def approved(state):
        return "APPROVED" in state.text("review")

    def for_vip(state, invocation_state):
        seen["inv"] = invocation_state
        return invocation_state.get("vip", False)

    graph = Graph(
        {
            "review": agent("review", "APPROVED"),
            "publish": agent("publish"),
            "vip": agent("vip"),
            "revise": agent("revise"),
        },
        edges=[
            ("review", "publish", approved),
            ("review", "vip", for_vip),
            ("review", "revise", lambda s: not approved(s)),
        ],
    )
    state = {"vip": True}
    result = graph("draft", invocation_state=state)
    assert sorted(result.execution_order) == ["publish", "review", "vip"]
    assert seen["inv"] is state
    assert result.invocation_state is state


def test_a_join_waits_for_all_predecessors_and_a_false_edge_counts_as_resolved():
    graph = Graph(
        {
            "start": agent("start"),
            "fast": agent("fast", "fast out"),
            "slow": agent("slow", "slow out", latency=0.05),
            "skipped": agent("skipped"),
            "join": echo_agent("join"),
        },
        edges=[
            ("start", "fast"),
            ("start", "slow"),
            ("start", "skipped", lambda s: False),
            ("fast", "join"),
            ("slow", "join"),
            ("skipped", "join"),
        ],
    )
    result = graph("task")
    assert result.status == Status.COMPLETED
    assert result.execution_order[-1] == "join"
    assert "skipped" not in result.results
    out = result.results["join"].output
    assert "From fast:\nfast out" in out
    assert "From slow:\nslow out" in out
    assert result.results["join"].execution_count == 1


def test_join_any_starts_on_the_first_edge():
    graph = Graph(
        {
            "start": agent("start"),
            "fast": agent("fast"),
            "slow": agent("slow", latency=0.1),
            "first": echo_agent("first"),
        },
        edges=[("start", "fast"), ("start", "slow"), ("fast", "first"), ("slow", "first")],
        joins={"first": "any"},
    )
    result = graph("task")
    assert result.execution_order.index("first") < result.execution_order.index("slow")
    assert "From fast" in result.results["first"].output
    assert "From slow" not in result.results["first"].output


async def test_nodes_start_when_ready_not_per_batch():
    slow_may_finish = anyio.Event()

    async def slow(node_input):
        with anyio.fail_after(5):  # per-batch scheduling would never start "after_fast" while this waits
            await slow_may_finish.wait()
        return "slow"

    async def after_fast(node_input):
        slow_may_finish.set()
        return "after fast"

    graph = Graph(
        {"start": lambda i: "s", "fast": lambda i: "f", "slow": slow, "after_fast": after_fast},
        edges=[("start", "fast"), ("start", "slow"), ("fast", "after_fast")],
    )
    result = await graph.invoke_async("go")
    assert result.status == Status.COMPLETED
    assert result.execution_order.index("after_fast") < result.execution_order.index("slow")


async def test_max_concurrency_bounds_running_nodes():
    running = 0
    peak = 0

    async def work(node_input):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return node_input.node_id

    nodes = {"start": lambda i: "go", **{f"w{i}": work for i in range(8)}}
    # each work node needs its own function object
    nodes.update({f"w{i}": (lambda f: lambda node_input: f(node_input))(work) for i in range(8)})
    graph = Graph(nodes, edges=[("start", f"w{i}") for i in range(8)], max_concurrency=3)
    result = await graph.invoke_async("go")
    assert result.status == Status.COMPLETED
    assert peak == 3


def test_max_node_executions_ends_a_loop_as_failed_naming_the_limit():
    graph = Graph(
        {"write": agent("write", *["draft"] * 10), "review": agent("review", *["REVISE"] * 10)},
        edges=[("write", "review"), ("review", "write", lambda s: "REVISE" in s.text("review"))],
        entry_points=["write"],
        max_node_executions=5,
    )
    result = graph("essay")
    assert result.status == Status.FAILED
    assert result.reason.startswith("max_node_executions limit (5) reached")
    assert result.execution_count == 5


def test_review_loop_until_approved():
    reviews = ScriptedModel(["REVISE: add sources", "APPROVED"])
    graph = Graph(
        {
            "research": agent("research", "facts"),
            "write": agent("write", "draft 1", "draft 2"),
            "review": Agent(name="review", model=reviews),
        },
        edges=[
            ("research", "write"),
            ("write", "review"),
            ("review", "write", lambda s: "REVISE" in s.text("review")),
        ],
        max_node_executions=10,
    )
    result = graph("essay")
    assert result.status == Status.COMPLETED
    assert result.execution_order == ["research", "write", "review", "write", "review"]
    assert result.results["write"].output == "draft 2"
    assert result.results["write"].execution_count == 2
    # the writer keeps its conversation across the loop and saw the review
    writer = graph.nodes["write"].agent
    assert len(writer.messages) == 4
    assert "REVISE: add sources" in writer.messages[2]["content"][0]["text"]


def test_reset_on_revisit_starts_the_agent_afresh():
    graph = (
        GraphBuilder()
        .add_node(agent("write", "d1", "d2"))
        .add_node(Agent(name="review", model=ScriptedModel(["REVISE", "OK"])))
        .add_edge("write", "review")
        .add_edge("review", "write", lambda s: s.text("review") == "REVISE")
        .set_entry_point("write")
        .set_max_node_executions(10)
        .reset_on_revisit(True)
        .build()
    )
    graph("essay")
    assert len(graph.nodes["write"].agent.messages) == 2


def test_execution_timeout_and_node_timeout_name_the_limit():
    slow = Graph({"slow": agent("slow", latency=1.0)}, execution_timeout=0.1)
    result = slow("x")
    assert result.status == Status.FAILED
    assert result.reason == "execution_timeout (0.1s) exceeded"
    slow_node = Graph({"slow": agent("slow", latency=1.0)}, node_timeout=0.1)
    result = slow_node("x")
    assert result.status == Status.FAILED
    assert "node_timeout (0.1s) exceeded by node 'slow'" in result.reason


async def test_a_failing_node_fails_the_run_and_cancels_running_siblings():
    finished = []

    async def long_sibling(node_input):
        await anyio.sleep(2)
        finished.append("long")
        return "never"

    def broken(node_input):
        raise RuntimeError("disk on fire")

    graph = Graph(
        {"start": lambda i: "go", "long": long_sibling, "broken": broken, "after": lambda i: "x"},
        edges=[("start", "long"), ("start", "broken"), ("broken", "after")],
    )
    started = time.perf_counter()
    result = await graph.invoke_async("go")
    assert time.perf_counter() - started < 1.5
    assert result.status == Status.FAILED
    assert result.error == "RuntimeError: disk on fire"
    assert result.reason == "node 'broken' failed: RuntimeError: disk on fire"
    assert result.results["broken"].status == Status.FAILED
    assert finished == []
    assert "after" not in result.results


def test_a_raising_condition_fails_the_run_naming_the_edge():
    graph = Graph({"a": agent("a"), "b": agent("b")}, edges=[("a", "b", lambda s: 1 / 0)])
    result = graph("x")
    assert result.status == Status.FAILED
    assert "condition of edge a -> b raised ZeroDivisionError" in result.reason


def test_results_usage_order_and_timings():
    graph = Graph([agent("a", "alpha"), agent("b", "beta")], edges=[("a", "b")])
    result = graph("task")
    assert result.usage.total_tokens == sum(r.usage.total_tokens for r in result.results.values())
    assert result.usage.total_tokens > 0
    assert all(r.execution_time_ms >= 0 for r in result.results.values())
    assert result.execution_time_ms > 0
    assert result.execution_count == 2


def test_nested_graph_and_swarm_as_nodes():
    inner = Graph([agent("inner_a", "inner answer")], id="inner")
    handoff = ToolCall("handoff_to_agent", {"agent_name": "closer", "message": "finish"})
    swarm = Swarm([agent("opener", handoff), agent("closer", "swarm answer")], id="team")
    outer = Graph(
        {"inner": inner, "team": swarm, "final": echo_agent("final")},
        edges=[("inner", "team"), ("team", "final")],
    )
    result = outer("big task")
    assert result.status == Status.COMPLETED
    assert result.results["inner"].output == "inner answer"
    assert result.results["team"].output == "swarm answer"
    assert "From team:\nswarm answer" in result.results["final"].output
    assert result.usage.total_tokens == sum(r.usage.total_tokens for r in result.results.values())


async def test_stream_async_yields_node_events_and_the_result():
    graph = Graph([agent("a", "alpha"), agent("b", "beta")], edges=[("a", "b")])
    events = await collect(graph.stream_async("task"))
    kinds = [
        (type(e).__name__, getattr(e, "node_id", None)) for e in events if not isinstance(e, NodeStreamEvent)
    ]
    assert kinds == [
        ("NodeStartEvent", "a"),
        ("NodeStopEvent", "a"),
        ("NodeStartEvent", "b"),
        ("NodeStopEvent", "b"),
        ("MultiAgentResultEvent", None),
    ]
    inner = [e for e in events if isinstance(e, NodeStreamEvent)]
    assert {e.node_id for e in inner} == {"a", "b"}
    assert isinstance(events[-1], MultiAgentResultEvent)
    assert events[-1].result.status == Status.COMPLETED
    assert isinstance(events[0], NodeStartEvent)
    assert isinstance(events[-2], NodeStopEvent)


def test_hooks_see_every_node_and_may_cancel_one():
    seen = []

    class Watch:
        def register_hooks(self, registry):
            registry.add_callback(BeforeNodeCall, self.before)
            registry.add_callback(AfterNodeCall, lambda e: seen.append(("after", e.node_id, e.result.status)))

        def before(self, event):
            seen.append(("before", event.node_id))
            if event.node_id == "b":
                event.cancel_node = "not today"

    graph = Graph([agent("a"), agent("b"), agent("c")], edges=[("a", "b"), ("b", "c")], hooks=[Watch()])
    result = graph("x")
    assert result.status == Status.FAILED
    assert result.reason == "node 'b' was cancelled by a hook: not today"
    assert seen == [
        ("before", "a"),
        ("after", "a", Status.COMPLETED),
        ("before", "b"),
        ("after", "b", Status.FAILED),
    ]


def test_invocation_state_reaches_nodes_conditions_hooks_and_tools():
    reached = set()
    state = {"user": "u-1"}

    @tool(context=True)
    def whoami(tool_context: ToolContext) -> str:
        """Who is asking."""
        assert tool_context.invocation_state is state
        reached.add("tool")
        return tool_context.invocation_state["user"]

    def fn(node_input):
        assert node_input.invocation_state is state
        reached.add("function")
        return "ok"

    def condition(graph_state, invocation_state):
        assert invocation_state is state
        reached.add("condition")
        return True

    class Hook:
        def register_hooks(self, registry):
            registry.add_callback(BeforeNodeCall, self.check)

        def check(self, event):
            assert event.invocation_state is state
            reached.add("hook")

    talker = Agent(name="talker", model=ScriptedModel([ToolCall("whoami"), "done"]), tools=[whoami])
    graph = Graph({"fn": fn, "talker": talker}, edges=[("fn", "talker", condition)], hooks=[Hook()])
    assert graph("x", invocation_state=state).status == Status.COMPLETED
    assert reached == {"tool", "function", "condition", "hook"}


def test_shared_state_across_functions_conditions_hooks_and_tools():
    @tool(context=True)
    def bump(tool_context: ToolContext) -> str:
        """Count in the orchestrator's shared state."""
        shared = tool_context.orchestrator.state
        shared.set("count", shared.get("count") + 1)
        return "bumped"

    def start(node_input):
        node_input.state.set("count", 1)
        return "started"

    class Hook:
        def register_hooks(self, registry):
            registry.add_callback(
                AfterNodeCall, lambda e: e.orchestrator.state.set(f"done_{e.node_id}", True)
            )

    bumper = Agent(name="bumper", model=ScriptedModel([ToolCall("bump"), "ok"] * 2), tools=[bump])
    graph = Graph(
        {"start": start, "bumper": bumper, "end": lambda i: i.state.get("count")},
        edges=[("start", "bumper"), ("bumper", "end", lambda s: s.state.get("count") == 2)],
        hooks=[Hook()],
        state={"initial": True},
    )
    result = graph("x")
    assert result.results["end"].output == 2
    assert graph.state.get() == {
        "initial": True,
        "count": 2,
        "done_start": True,
        "done_bumper": True,
        "done_end": True,
    }
    graph("again")  # a fresh run starts from the initial shared state
    assert graph.state.get("count") == 2


def test_serialize_and_deserialize_state_round_trip():
    graph = Graph([agent("a", "alpha"), agent("b", "beta")], edges=[("a", "b")], id="g")
    graph("task")
    payload = graph.serialize_state()
    assert payload["run"]["status"] == "completed"
    assert payload["node/a"]["status"] == "completed"
    assert payload["execution_order"] == ["a", "b"]
    assert payload["agent/a/messages"][1]["content"][0]["text"] == "alpha"
    twin = Graph([agent("a"), agent("b")], edges=[("a", "b")], id="g")
    twin.deserialize_state(payload)
    assert twin.status == Status.COMPLETED
    assert twin.nodes["a"].agent.messages == graph.nodes["a"].agent.messages
    assert twin.serialize_state() == payload


def test_serialize_state_is_plain_json_even_with_images():
    import json

    png = b"\x89PNG\r\n\x1a\n-bytes"
    looker = Agent(name="looker", model=ScriptedModel(["a red dot"]))
    graph = Graph({"looker": looker}, id="g")
    graph([{"text": "what is this?"}, {"image": {"format": "png", "source": {"bytes": png}}}])
    payload = json.loads(json.dumps(graph.serialize_state()))
    twin = Graph({"looker": Agent(name="looker")}, id="g")
    twin.deserialize_state(payload)
    assert twin.nodes["looker"].agent.messages[0]["content"][1]["image"]["source"]["bytes"] == png


async def test_a_wide_join_runs_once_with_every_input_whatever_order_its_predecessors_finish_in():
    """The join keeps the set of predecessors it still waits for between completions (not a scan of
    all of them per completion): it must still wait for the last one, in any finishing order."""
    import random

    width = 60
    delays = random.Random(7).sample(range(width), width)

    def worker(i: int):
        async def run(node_input):
            await anyio.sleep(delays[i] / 2000)
            return f"part {i}"

        return run

    joined: list[dict] = []

    def join(node_input):
        joined.append(dict(node_input.inputs))
        return "joined"

    nodes = {"entry": lambda node_input: "go", **{f"w{i}": worker(i) for i in range(width)}, "join": join}
    edges = [("entry", f"w{i}") for i in range(width)] + [(f"w{i}", "join") for i in range(width)]
    result = await Graph(nodes, edges=edges).invoke_async("fan out")
    assert result.status.value == "completed"
    assert len(joined) == 1
    assert joined[0] == {f"w{i}": f"part {i}" for i in range(width)}
