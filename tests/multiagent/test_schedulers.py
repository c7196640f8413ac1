"""The schedulers alone (``GraphScheduler``, ``SwarmScheduler``, ``MapScheduler``): no event loop, no task,
no node ever runs. A test drives a scheduler the way a runner does (``next``, ``start``, ``complete``)
with made-up results, and reads the run document it leaves: resume, joins, conditions, bounded cycles,
retries, budgets, migrations, maps, handoffs. The property test checks that for a DAG any order of
completions gives the same final document as running it in sequence."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra import Agent
from orchestra.budget import Budget, Spent
from orchestra.errors import RunError
from orchestra.interrupts import Interrupt
from orchestra.messages import Usage
from orchestra.multiagent import (
    Graph,
    GraphScheduler,
    Map,
    MapScheduler,
    NodeInput,
    NodeResult,
    RunDocument,
    SavedRun,
    Status,
    Swarm,
    SwarmScheduler,
)


def step(node_input):
    raise AssertionError("a scheduler test never runs a node")


def graph_of(nodes, edges=(), **options) -> Graph:
    graph = Graph(dict.fromkeys(nodes, step), edges, **options)
    graph.start_fresh("the task")
    return graph


def done(node_id: str, output: Any = None, **fields: Any) -> NodeResult:
    return NodeResult(node_id=node_id, status=Status.COMPLETED, output=output or f"out {node_id}", **fields)


def drive(
    scheduler: GraphScheduler,
    result: Callable[[str, NodeInput], NodeResult] = lambda n, _: done(n),
    pick: Callable[[list[str]], int] = lambda running: 0,
    stop_after: int | None = None,
) -> list[str]:
    """Run a graph's scheduler to its end as a runner would (every ready node starts at once, ``pick``
    chooses which running node completes next); returns the nodes in the order they started. With
    ``stop_after``, stops (as a killed process would) after that many completions."""
    scheduler.begin()
    running: list[tuple[str, NodeInput]] = []
    started: list[str] = []
    completions = 0
    while True:
        while (node_id := scheduler.next()) is not None:
            running.append((node_id, scheduler.start(node_id, {})))
            started.append(node_id)
        if not running or scheduler.failure is not None:
            break
        if stop_after is not None and completions == stop_after:
            return started
        node_id, node_input = running.pop(pick([n for n, _ in running]))
        scheduler.complete(result(node_id, node_input), {})
        completions += 1
    scheduler.finish()
    return started


def saved(document: RunDocument) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The document as a session would load it back: its whole JSON, decoded afresh."""
    fields, logs = document.whole()
    return json.loads(json.dumps(fields)), json.loads(json.dumps(logs))


# -- graphs -----------------------------------------------------------------------------------------------


def test_a_join_waits_for_every_predecessor_and_gets_their_outputs():
    graph = graph_of("abcd", [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    inputs: dict[str, dict[str, Any]] = {}

    def result(node_id: str, node_input: NodeInput) -> NodeResult:
        inputs[node_id] = node_input.inputs
        return done(node_id)

    assert drive(graph.scheduler(), result) == ["a", "b", "c", "d"]
    assert inputs["d"] == {"b": "out b", "c": "out c"}
    assert graph.status == Status.COMPLETED
    assert graph.build_result().output == "out d"


def test_a_join_any_node_starts_on_the_first_edge_and_runs_once():
    graph = graph_of("abcd", [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], joins={"d": "any"})
    started = drive(graph.scheduler(), pick=lambda running: len(running) - 1)  # c completes before b
    assert started == ["a", "b", "c", "d"]
    assert graph.document.node("d")["executions"] == 1
    assert graph.document.node("d")["activation"] == ["c"]


def test_conditions_skip_edges_and_a_skipped_branch_does_not_block_a_join():
    graph = graph_of(
        "abcd",
        [("a", "b", lambda state: state.output("a") == "yes"), ("a", "c"), ("b", "d"), ("c", "d")],
    )
    started = drive(graph.scheduler(), lambda n, _: done(n, "no" if n == "a" else None))
    assert started == ["a", "c", "d"]
    assert graph.document.node("b")["status"] == "pending"
    assert graph.document.node("a")["incoming"] == {}
    assert graph.document.node("b")["incoming"] == {"a": "skipped"}
    assert graph.status == Status.COMPLETED


def test_a_condition_that_raises_fails_the_run_naming_the_edge():
    def broken(state):
        raise ValueError("no such field")

    graph = graph_of("ab", [("a", "b", broken)])
    drive(graph.scheduler())
    assert graph.status == Status.FAILED
    assert graph.run["reason"] == "the condition of edge a -> b raised ValueError: no such field"


def test_edges_evaluated_where_the_node_ran_are_applied_as_given():
    """The Temporal workflow's way: the activity evaluated the conditions; the scheduler is told."""
    graph = graph_of("abc", [("a", "b", step), ("a", "c", step)])
    scheduler = graph.scheduler()
    scheduler.begin()
    scheduler.start(scheduler.next(), {})
    scheduler.complete(done("a"), {}, fired={"b": False, "c": True})
    assert scheduler.next() == "c"
    assert scheduler.next() is None


def test_a_cycle_is_bounded_by_max_node_executions():
    graph = graph_of(
        ["draft", "review"],
        [("draft", "review"), ("review", "draft", lambda state: True)],
        entry_points=["draft"],
        max_node_executions=5,
    )
    assert drive(graph.scheduler()) == ["draft", "review", "draft", "review", "draft"]
    assert graph.status == Status.FAILED
    assert graph.run["reason"] == "max_node_executions limit (5) reached before node 'review' could run"
    assert graph.document.node("draft")["executions"] == 3


def test_a_resumed_run_goes_on_where_the_document_left_it():
    edges = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
    graph = graph_of("abcd", edges)
    # a and b complete; c is running when the process is killed.
    assert drive(graph.scheduler(), stop_after=2) == ["a", "b", "c"]
    again = Graph(dict.fromkeys("abcd", step), edges)
    again.document.load(*saved(graph.document))
    inputs: dict[str, dict[str, Any]] = {}

    def result(node_id: str, node_input: NodeInput) -> NodeResult:
        inputs[node_id] = node_input.inputs
        return done(node_id)

    assert drive(again.scheduler(), result) == ["c", "d"]  # completed nodes never run again
    assert again.document.node("c")["executions"] == 1  # the killed execution goes on, not a new one
    assert again.run["execution_count"] == 4
    assert inputs["d"] == {"b": "out b", "c": "out c"}  # b's output read back from the document
    assert list(again.document.log("execution_order")) == ["a", "b", "c", "d"]


def test_a_failed_node_fails_the_run_and_a_resume_runs_it_again():
    graph = graph_of("abc", [("a", "b"), ("b", "c")])

    def result(node_id: str, _: NodeInput) -> NodeResult:
        if node_id == "b":
            return NodeResult(node_id="b", status=Status.FAILED, error="boom")
        return done(node_id)

    drive(graph.scheduler(), result)
    assert graph.status == Status.FAILED
    assert graph.run["reason"] == "node 'b' failed: boom"
    again = Graph(dict.fromkeys("abc", step), [("a", "b"), ("b", "c")])
    again.document.load(*saved(graph.document))
    assert drive(again.scheduler()) == ["b", "c"]
    assert again.status == Status.COMPLETED


def test_an_interrupted_node_waits_and_its_answer_continues_the_same_execution():
    graph = graph_of("ab", [("a", "b")])
    question = Interrupt(id="q1", name="approve")

    def result(node_id: str, _: NodeInput) -> NodeResult:
        if node_id == "a":
            return NodeResult(node_id="a", status=Status.INTERRUPTED, interrupts=[question])
        return done(node_id)

    scheduler = graph.scheduler()
    drive(scheduler, result)
    assert scheduler.interrupts == [question]
    assert graph.status == Status.INTERRUPTED
    assert graph.run["interrupts"] == [question.model_dump(mode="json")]
    again = Graph(dict.fromkeys("ab", step), [("a", "b")])
    again.document.load(*saved(graph.document))
    assert drive(again.scheduler()) == ["a", "b"]
    assert again.document.node("a")["executions"] == 1


def test_a_hook_interrupt_before_a_node_queues_it_not_started():
    graph = graph_of("ab", [("a", "b")])
    scheduler = graph.scheduler()
    scheduler.begin()
    node_id = scheduler.next()
    scheduler.interrupt_before(node_id, Interrupt(id="q", name="ok?"))
    assert not scheduler.may_start
    assert scheduler.next() is None
    assert graph.document.node("a")["queued"]
    assert not graph.document.node("a")["started"]
    again = Graph(dict.fromkeys("ab", step), [("a", "b")])
    again.document.load(*saved(graph.document))
    drive(again.scheduler())
    assert again.document.node("a")["executions"] == 1


def test_retries_are_recorded_per_execution_and_a_resume_goes_on_from_them():
    graph = graph_of("a")
    scheduler = graph.scheduler()
    scheduler.begin()
    scheduler.start(scheduler.next(), {})
    scheduler.record_attempt("a", 1, "ModelThrottledError: slow down", 0.5)
    scheduler.record_attempt("a", 2, "ModelThrottledError: slow down", 1.0)
    assert [a["attempt"] for a in scheduler.attempts("a")] == [1, 2]
    assert graph.failed_attempts("a")[1] == {
        "attempt": 2,
        "error": "ModelThrottledError: slow down",
        "retry_in": 1.0,
    }
    again = Graph({"a": step})
    again.document.load(*saved(graph.document))  # killed while waiting to retry
    resumed = again.scheduler()
    resumed.begin()
    resumed.start(resumed.next(), {})
    assert [a["attempt"] for a in resumed.attempts("a")] == [1, 2]  # the third attempt is next


def test_a_new_execution_of_a_node_starts_a_new_round_of_attempts():
    graph = graph_of(
        ["a", "b"], [("a", "b"), ("b", "a", lambda s: True)], entry_points=["a"], max_node_executions=3
    )
    scheduler = graph.scheduler()
    scheduler.begin()
    scheduler.start(scheduler.next(), {})
    scheduler.record_attempt("a", 1, "boom", 0.1)
    scheduler.complete(done("a"), {})
    scheduler.start(scheduler.next(), {})
    scheduler.complete(done("b"), {})
    scheduler.start(scheduler.next(), {})  # a again: its second execution
    assert scheduler.attempts("a") == []
    assert graph.failed_attempts("a") == []


def test_a_spent_run_budget_stops_before_the_next_node_resumable():
    graph = graph_of("ab", [("a", "b")], budget=Budget(tokens=100))
    scheduler = graph.scheduler()
    scheduler.begin()
    scheduler.start(scheduler.next(0.0), {})
    scheduler.complete(done("a", usage=Usage(input_tokens=80, output_tokens=40, total_tokens=120)), {})
    spent = Spent()
    spent.add(80, 40, 0.0)
    graph.document.update_run(spent=spent.to_json())  # what the meter charged
    assert scheduler.next(elapsed_s=1.0) is None
    assert scheduler.stopped is not None
    assert "tokens budget" in scheduler.stopped
    scheduler.finish()
    assert graph.status == Status.INTERRUPTED
    assert graph.run["reason"] == scheduler.stopped
    assert graph.run["usage"]["totalTokens"] == 120


def test_an_agent_budget_stops_before_that_node_and_no_clock_means_no_run_budget_check():
    graph = graph_of("ab", [("a", "b")], budgets={"b": Budget(model_calls=1)})
    scheduler = graph.scheduler()
    scheduler.begin()
    scheduler.start(scheduler.next(), {})
    scheduler.complete(done("a"), {})
    graph.document.update_node("b", spent={"model_calls": 1})
    assert scheduler.budget_stop("b", 0.0) is not None
    assert scheduler.next(elapsed_s=0.0) is None
    assert "agent 'b'" in (scheduler.stopped or "")


def test_a_budget_interruption_of_a_node_stops_the_run():
    graph = graph_of("ab", [("a", "b")])
    stopped = NodeResult(node_id="a", status=Status.INTERRUPTED, error="BudgetExceeded: a nested run")
    drive(graph.scheduler(), lambda n, _: stopped if n == "a" else done(n))
    assert graph.status == Status.INTERRUPTED
    assert graph.run["reason"] == "BudgetExceeded: a nested run"
    assert graph.run["interrupts"] == []


def test_a_migration_renames_a_node_of_the_saved_run_and_it_goes_on_under_its_new_name():
    old = graph_of("ab", [("a", "b")], version="v1")
    drive(old.scheduler(), stop_after=1)  # a completed, b queued

    def rename(run: SavedRun) -> None:
        run.rename_node("b", "check")

    new = Graph({"a": step, "check": step}, [("a", "check")], version="v2", migrations={"v1": rename})
    new.document.load(*saved(old.document))
    new.migrate()
    assert new.run["version"] == "v2"
    assert new.run["migrations"] == [{"from": "v1", "to": "v2"}]
    assert drive(new.scheduler()) == ["check"]
    assert list(new.document.log("execution_order")) == ["a", "check"]


def test_a_run_of_another_graph_is_refused_naming_the_change():
    old = graph_of("ab", [("a", "b")])
    drive(old.scheduler(), stop_after=1)
    new = Graph({"a": step, "b": step, "c": step}, [("a", "b"), ("b", "c")])
    new.document.load(*saved(old.document))
    with pytest.raises(RunError, match="nodes added: c; edges added: b -> c"):
        new.migrate()
    new.migrate(force=True)  # force_resume


# -- the property: completion order does not change a DAG's outcome ------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str, bool | None]], dict[str, str]]:
    """A DAG whose nodes all hang from n0, some edges conditional (fixed outcomes), some joins "any"."""
    size = draw(st.integers(2, 8))
    ids = [f"n{i}" for i in range(size)]
    edges = []
    for j in range(1, size):
        for i in draw(st.lists(st.integers(0, j - 1), min_size=1, max_size=3, unique=True)):
            edges.append((ids[i], ids[j], draw(st.sampled_from([None, None, True, False]))))
    joins = {n: "any" for n in ids[1:] if draw(st.integers(0, 3)) == 0}
    return ids, edges, joins


def run_dag(dag, pick: Callable[[list[str]], int]) -> dict[str, Any]:
    ids, edges, joins = dag
    graph = graph_of(
        ids,
        [(s, d) if c is None else (s, d, (lambda state, c=c: c)) for s, d, c in edges],
        joins=joins,
    )

    def result(node_id: str, node_input: NodeInput) -> NodeResult:
        # A join="all" node's output names the predecessors it waited for (a set: order-free); a join="any"
        # node's input is whichever edge fired first, by definition, so its output leaves it out.
        waited = "" if node_id in joins else ",".join(sorted(node_input.inputs))
        return done(
            node_id, f"{node_id}<{waited}>", usage=Usage(input_tokens=1, output_tokens=2, total_tokens=3)
        )

    drive(graph.scheduler(), result, pick)
    document = graph.document
    nodes = {}
    for node_id in document.node_ids():
        record = document.node(node_id)
        kept = ("status", "executions", "terminal", "result")
        nodes[node_id] = {k: v for k, v in record.items() if k in kept}
        if nodes[node_id].get("result"):
            nodes[node_id]["result"] = {
                k: v for k, v in record["result"].items() if k not in ("execution_time_ms",)
            }
    return {
        "run": {k: document.run[k] for k in ("status", "reason", "execution_count", "usage")},
        "nodes": nodes,
        "executed": sorted(document.log("execution_order")),
        "output": graph.build_result().output,
        "state": document.state.to_dict(),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(), data=st.data())
def test_any_order_of_completions_gives_a_dag_the_same_final_document(dag, data):
    in_sequence = run_dag(dag, lambda running: 0)
    any_order = run_dag(dag, lambda running: data.draw(st.integers(0, len(running) - 1)))
    assert any_order == in_sequence
    assert in_sequence["run"]["status"] == "completed"


# -- maps -------------------------------------------------------------------------------------------------


def map_document(spec: Map) -> RunDocument:
    graph = Graph({"m": spec})
    graph.start_fresh("the task")
    return graph.document


def item(output: Any, status: str = "completed", **fields: Any) -> dict[str, Any]:
    return {
        "status": status,
        "output": output,
        "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        **fields,
    }


def test_a_map_runs_its_items_and_its_result_is_their_outputs_in_item_order():
    spec = Map(step)
    maps = MapScheduler(map_document(spec), "m")
    assert maps.begin(spec, items=["a", "b", "c"]) == 3
    taken = [maps.take(), maps.take(), maps.take(), maps.take()]
    assert taken == [0, 1, 2, None]
    for index in (2, 0, 1):
        assert not maps.joined
        maps.settle(index, item(f"out {index}"))
    assert maps.joined
    result = maps.result("m", spec)
    assert result.output == ["out 0", "out 1", "out 2"]
    assert result.usage.total_tokens == 6
    maps.clear()
    assert maps.document.names("map/") == []


def test_a_map_joined_on_its_first_k_items_is_done_with_them():
    spec = Map(step, join=2)
    maps = MapScheduler(map_document(spec), "m")
    maps.begin(spec, items=[1, 2, 3, 4])
    maps.settle(3, item("d"))
    assert not maps.joined
    maps.settle(1, item("b"))
    assert maps.joined
    assert maps.result("m", spec).output == ["b", "d"]


def test_an_until_join_sees_the_completed_items_in_item_order():
    seen = []

    def until(items):
        seen.append([(i.index, i.item, i.output) for i in items])
        return len(items) == 2

    spec = Map(step, join=until)
    maps = MapScheduler(map_document(spec), "m")
    maps.begin(spec, items=["x", "y", "z"])
    maps.settle(2, item("Z"))
    assert not maps.joined
    maps.settle(0, item("X"))
    assert maps.joined
    assert seen[-1] == [(0, "x", "X"), (2, "z", "Z")]


def test_a_resumed_map_runs_only_the_items_without_a_result():
    spec = Map(step)
    document = map_document(spec)
    first = MapScheduler(document, "m")
    first.begin(spec, items=[10, 20, 30])
    first.settle(1, item(40))
    first.retrying(2, [{"attempt": 1, "error": "boom", "retry_in": 0.1}])
    again = MapScheduler(document, "m")
    assert again.begin(spec) == 3  # the list is the saved one
    assert [again.take(), again.take(), again.take()] == [0, 2, None]
    assert [i.output for i in again.done] == [40]
    assert again.item(2)["attempts"][0]["error"] == "boom"


def test_a_failed_item_fails_the_map_and_no_other_item_starts():
    spec = Map(step)
    maps = MapScheduler(map_document(spec), "m")
    maps.begin(spec, items=[1, 2, 3])
    maps.take()
    maps.settle(0, {"status": "failed", "error": "ValueError: bad item"})
    assert maps.failure == "item 0 failed: ValueError: bad item"
    assert maps.take() is None


def test_a_budget_stopped_item_is_not_recorded_and_stops_the_map():
    spec = Map(step)
    maps = MapScheduler(map_document(spec), "m")
    maps.begin(spec, items=[1, 2])
    maps.take()
    maps.settle(0, {"status": "stopped", "error": "BudgetExceeded: run"})
    assert maps.stopped == "BudgetExceeded: run"
    assert maps.item(0) is None  # it runs again on resume
    assert maps.take() is None


def test_a_map_on_a_temporal_workflow_knows_only_its_count_and_asked_questions():
    spec = Map(step)
    maps = MapScheduler(map_document(spec), "m")
    maps.begin(spec, count=2)  # the workflow never holds the list
    question = Interrupt(id="q", name="which?")
    maps.settle(0, {"status": "interrupted"}, interrupts=[question.model_dump(mode="json")])
    maps.settle(1, {"status": "completed"}, joined=True)  # an until join its activity found to hold
    assert maps.interrupts == [question]
    assert maps.joined


def test_clearing_a_map_removes_its_nested_maps_too():
    spec = Map(Map(step))
    document = map_document(spec)
    outer = MapScheduler(document, "m")
    outer.begin(spec, items=[[1, 2], [3]])
    inner = MapScheduler(document, "m:0")
    inner.begin(spec.node, items=[1, 2])
    inner.settle(0, item(1))
    assert document.names("map/m:0")
    outer.clear()
    assert document.names("map/") == []


def test_a_completed_map_node_leaves_no_items_in_the_document():
    graph = Graph({"split": step, "m": Map(step)}, [("split", "m")])
    graph.start_fresh("go")
    scheduler = graph.scheduler()
    scheduler.begin()
    scheduler.start(scheduler.next(), {})
    scheduler.complete(done("split", [1, 2]), {})
    scheduler.start(scheduler.next(), {})
    maps = MapScheduler(graph.document, "m")
    maps.begin(graph.nodes["m"].executor, items=[1, 2])
    maps.settle(0, item(2))
    maps.settle(1, item(4))
    scheduler.complete(maps.result("m", graph.nodes["m"].executor), {})
    assert graph.document.names("map/") == []
    fields, _, unset = graph.document.take_changes()
    assert "map/m/items" in unset
    assert not any(name.startswith("map/") for name in fields)


# -- swarms -----------------------------------------------------------------------------------------------


def swarm_of(*names: str, **options: Any) -> Swarm:
    swarm = Swarm([Agent(name=n) for n in names], **options)
    swarm.start_fresh("the task")
    return swarm


def handoff(src: str, dst: str, message: str = "over to you", context: dict | None = None) -> dict:
    return {"from": src, "to": dst, "message": message, "context": context or {}}


def turn(scheduler: SwarmScheduler, result: NodeResult, passed: dict | None = None) -> NodeInput:
    node_id = scheduler.next()
    assert node_id == result.node_id
    assert scheduler.check_limits(node_id)
    node_input = scheduler.start(node_id, {})
    scheduler.end_turn(result, passed)
    return node_input


def test_a_handoff_passes_the_task_the_message_and_the_shared_context():
    swarm = swarm_of("a", "b")
    scheduler = swarm.scheduler()
    scheduler.begin()
    first = turn(scheduler, done("a"), handoff("a", "b", "check the numbers", {"total": 3}))
    assert first.task.startswith("the task\n\nSwarm context:")
    second = turn(scheduler, done("b", "the answer"))
    assert second.task.startswith("check the numbers\n\nSwarm context:")
    assert "Handed off to you by a." in second.task
    assert 'Shared context: {"a": {"total": 3}}' in second.task
    assert scheduler.next() is None
    assert scheduler.output == "the answer"
    scheduler.finish()
    result = swarm.build_result()
    assert result.status == Status.COMPLETED
    assert result.node_history == ["a", "b"]
    assert result.handoffs == [{"from": "a", "to": "b", "message": "check the numbers"}]
    assert swarm.document.field("last_active") == "b"


def test_a_swarm_fails_at_max_handoffs_and_at_max_iterations():
    swarm = swarm_of("a", "b", max_handoffs=2)
    scheduler = swarm.scheduler()
    scheduler.begin()
    turn(scheduler, done("a"), handoff("a", "b"))
    turn(scheduler, done("b"), handoff("b", "a"))
    turn(scheduler, done("a"), handoff("a", "b"))
    assert scheduler.failure == ("max_handoffs limit (2) reached: a tried to hand off to b", None)

    swarm = swarm_of("a", "b", max_iterations=2)
    scheduler = swarm.scheduler()
    scheduler.begin()
    turn(scheduler, done("a"), handoff("a", "b"))
    turn(scheduler, done("b"), handoff("b", "a"))
    assert not scheduler.check_limits(scheduler.next())
    assert scheduler.failure == ("max_iterations limit (2) reached before agent 'a' could run", None)


def test_repetitive_handoffs_fail_the_run():
    swarm = swarm_of(
        "a", "b", "c", repetitive_handoff_detection_window=4, repetitive_handoff_min_unique_agents=3
    )
    scheduler = swarm.scheduler()
    scheduler.begin()
    for src, dst in (("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")):
        turn(scheduler, done(src), handoff(src, dst))
    assert scheduler.failure is not None
    assert scheduler.failure[0].startswith("repetitive handoffs: the last 4 turns")


def test_an_interrupted_turn_is_the_same_execution_when_it_resumes():
    swarm = swarm_of("a", "b")
    scheduler = swarm.scheduler()
    scheduler.begin()
    turn(
        scheduler,
        NodeResult(node_id="a", status=Status.INTERRUPTED, interrupts=[Interrupt(id="q", name="ok?")]),
    )
    assert scheduler.next() is None
    scheduler.finish()
    assert swarm.status == Status.INTERRUPTED
    again = Swarm([Agent(name="a"), Agent(name="b")])
    again.document.load(*saved(swarm.document))
    resumed = again.scheduler()
    resumed.begin()
    assert resumed.next() == "a"
    resumed.check_limits("a")
    assert resumed.start("a", {}).execution_count == 1


def test_a_budget_stops_a_swarm_at_the_turn_that_reached_it():
    swarm = swarm_of("a", "b")
    scheduler = swarm.scheduler()
    scheduler.begin()
    turn(scheduler, NodeResult(node_id="a", status=Status.INTERRUPTED, error="BudgetExceeded: agent 'a'"))
    assert scheduler.next() is None
    scheduler.finish()
    assert swarm.status == Status.INTERRUPTED
    assert swarm.run["reason"] == "BudgetExceeded: agent 'a'"


def test_a_sticky_swarm_starts_its_next_run_where_the_last_one_ended():
    swarm = swarm_of("a", "b", resume_from="last_active", history="shared")
    scheduler = swarm.scheduler()
    scheduler.begin()
    turn(scheduler, done("a"), handoff("a", "b", context={"k": 1}))
    turn(scheduler, done("b", "first answer"))
    scheduler.finish()
    swarm.start_fresh("the next question")
    following = swarm.scheduler()
    assert following.first_agent() == "b"
    following.begin()
    node_input = turn(following, done("b", "second answer"))
    assert "user: the task -> b: first answer" in node_input.task
    assert 'Shared context: {"a": {"k": 1}}' in node_input.task
