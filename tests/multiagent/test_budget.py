"""Run budgets: a run stops before the model call it can no longer afford, saved as interrupted, and
resumes with a larger budget; what it spent is saved with it."""

import itertools

import pytest

from orchestra import Agent, load, tool
from orchestra.errors import BudgetExceededError, ConfigurationError
from orchestra.history import history_problems
from orchestra.multiagent import Budget, Graph, Map, Price, Swarm
from orchestra.multiagent.budget import Spent, exceeded
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel, ToolCall


def agent(name, calls):
    def reply(messages, specs):
        calls.append(name)
        return f"{name} ok"

    return Agent(name=name, model=FunctionModel(reply, name="function:test-model"))


def chain(calls, budget, store, names=("a", "b", "c", "d")):
    return Graph(
        [agent(n, calls) for n in names],
        list(itertools.pairwise(names)),
        id="chain",
        budget=budget,
        session_manager=SnapshotSessionManager("s", storage=store),
    )


def test_a_spent_budget_stops_the_run_before_the_next_model_call_and_a_larger_one_resumes_it():
    calls, store = [], InMemoryStorage()
    graph = chain(calls, Budget(model_calls=2), store)
    result = graph("go")
    assert result.status.value == "interrupted"
    assert result.interrupts == []
    assert result.reason == (
        "BudgetExceeded: run of graph 'chain' spent its model_calls budget (2 of 2); resume it with a larger budget"
    )
    assert calls == ["a", "b"]
    assert graph.run["spent"]["model_calls"] == 2
    assert graph.run["budget"] == {"model_calls": 2}
    # The same budget again: nothing runs.
    assert chain(calls, Budget(model_calls=2), store)().status.value == "interrupted"
    assert calls == ["a", "b"]
    resumed = chain(calls, Budget(model_calls=10), store)
    result = resumed()
    assert result.status.value == "completed"
    assert calls == ["a", "b", "c", "d"]
    assert resumed.run["spent"]["model_calls"] == 4  # counted across the resume


def test_a_token_budget_stops_in_the_middle_of_an_agent_and_rolls_its_turn_back():
    @tool
    def look(q: str) -> str:
        """Look.

        Args:
            q: what.
        """
        return "seen"

    def reply(messages, specs):
        return "done" if "toolResult" in messages[-1]["content"][0] else ToolCall("look", {"q": "x"})

    worker = Agent(name="worker", model=FunctionModel(reply), tools=[look])
    store = InMemoryStorage()
    graph = Graph(
        [worker], budget=Budget(tokens=1), session_manager=SnapshotSessionManager("s", storage=store)
    )
    result = graph("go")
    assert result.status.value == "interrupted"
    assert result.reason.startswith("BudgetExceeded: run of graph 'graph' spent its tokens budget (")
    assert worker.messages == []  # the node re-runs from its state before it started
    assert history_problems(worker.messages) == []
    assert graph.document.node("worker")["status"] == "interrupted"
    again = Graph(
        [Agent(name="worker", model=FunctionModel(reply), tools=[look])],
        budget=Budget(tokens=10_000),
        session_manager=SnapshotSessionManager("s", storage=store),
    )
    assert again().output == "done"


def test_cost_comes_from_the_price_table_and_a_model_without_a_price_refuses_to_run():
    calls = []
    prices = {
        "function:test-*": Price(input=1_000_000, output=2_000_000)
    }  # $1 per input token, $2 per output
    graph = chain(calls, Budget(cost_usd=1000, prices=prices), InMemoryStorage(), names=("a",))
    result = graph("go")
    spent = graph.run["spent"]
    assert spent["cost_usd"] == spent["input_tokens"] * 1 + spent["output_tokens"] * 2
    assert result.status.value == "completed"
    unpriced = chain(
        calls, Budget(cost_usd=1, prices={"openai:*": Price(1, 1)}), InMemoryStorage(), names=("a",)
    )
    with pytest.raises(
        ConfigurationError, match=r"no price for model 'function:test-model'.*ships no prices"
    ):
        unpriced("go")


def test_an_agent_budget_caps_that_agent_only():
    calls = []
    graph = Graph(
        {
            "a": lambda: ["x", "y", "z"],
            "each": Map(agent("item", calls), max_concurrency=1),
            "b": agent("b", calls),
        },
        [("a", "each"), ("each", "b")],
        budgets={"each": Budget(model_calls=2)},
    )
    result = graph("go")
    assert result.status.value == "interrupted"
    assert result.reason.startswith("BudgetExceeded: agent 'each' spent its model_calls budget (2 of 2)")
    assert graph.document.node("each")["spent"]["model_calls"] == 2
    assert calls.count("item") == 2


def test_nested_runs_and_swarms_count_into_the_budget():
    calls = []
    inner = Graph([agent("x", calls), agent("y", calls)], [("x", "y")], id="inner")
    outer = Graph(
        {"first": agent("first", calls), "inner": inner}, [("first", "inner")], budget=Budget(model_calls=2)
    )
    assert outer("go").status.value == "interrupted"
    assert calls == ["first", "x"]

    def hand(messages, specs):
        return ToolCall("handoff_to_agent", {"agent_name": "two", "message": "yours"})

    swarm = Swarm(
        [Agent(name="one", model=FunctionModel(hand)), Agent(name="two", model=FunctionModel(hand))],
        budget=Budget(model_calls=3),
    )
    result = swarm("go")
    assert result.status.value == "interrupted"
    assert result.reason.startswith("BudgetExceeded: run of swarm 'swarm'")
    assert swarm.run["spent"]["model_calls"] == 3


def test_a_wall_time_budget_counts_the_time_the_run_ran():
    graph = Graph([agent("a", [])], budget=Budget(wall_seconds=0))
    result = graph("go")
    assert result.status.value == "interrupted"
    assert "wall_seconds budget" in result.reason


def test_limits_are_checked_as_reached_not_passed():
    spent = Spent(input_tokens=60, output_tokens=40, model_calls=3, cost_usd=0.5)
    assert exceeded(Budget(tokens=101), spent, 0, "run") is None
    error = exceeded(Budget(tokens=100), spent, 0, "run")
    assert isinstance(error, BudgetExceededError)
    assert (error.limit, error.allowed, error.spent, error.scope) == ("tokens", 100, 100, "run")
    with pytest.raises(ConfigurationError, match="Budget.tokens must be a number, 0 or more"):
        Budget(tokens=-1)
    assert Budget(prices={"a": {"input": 1, "output": 2}, "b*": (3, 4)}).price("bee") == Price(3, 4)


def test_yaml_budgets_for_the_run_and_an_agent(tmp_path):
    (tmp_path / "p.yaml").write_text(
        """
version: 1
kind: graph
id: p
budget: {tokens: 5000, cost_usd: 2.5, prices: {'openai:gpt-4o-mini': {input: 0.15, output: 0.6}}}
agents:
  - name: writer
    budget: {model_calls: 3}
    model: {provider: function, function: 'tests.support:reply_fn'}
nodes:
  - agent: writer
"""
    )
    graph = load(tmp_path / "p.yaml")
    assert graph.budget == Budget(tokens=5000, cost_usd=2.5, prices={"openai:gpt-4o-mini": Price(0.15, 0.6)})
    assert graph.nodes["writer"].budget == Budget(model_calls=3)
