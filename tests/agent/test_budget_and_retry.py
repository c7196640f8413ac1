"""A standalone agent's budget and retry policy (``Agent(budget=..., retry=...)``).

A budget caps one invocation: past a limit the invocation raises ``BudgetExceededError`` (naming the
limit) before its next model call, and its turn is rolled back, so the history (and what a session
saved) is what it was before. A retry policy makes a failed model call again, by its ``retry_on``, with
nothing else of the turn run twice; configuration errors are never retried."""

from __future__ import annotations

from typing import Any

import pytest

from orchestra import Agent, tool
from orchestra.budget import Budget, Price
from orchestra.errors import (
    BudgetExceededError,
    ConfigurationError,
    ModelAuthenticationError,
    ModelError,
    ModelThrottledError,
)
from orchestra.history import history_problems
from orchestra.multiagent import Budget as MultiagentBudget
from orchestra.multiagent import Graph
from orchestra.multiagent import RetryPolicy as MultiagentRetryPolicy
from orchestra.retry import RetryPolicy
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel, ToolCall

FAST = {"initial_interval": 0.001, "jitter": 0.0}


def test_budget_and_retry_policy_are_the_ones_the_orchestrators_use():
    assert MultiagentBudget is Budget
    assert MultiagentRetryPolicy is RetryPolicy


def test_anything_else_is_refused_with_the_agents_name():
    with pytest.raises(ConfigurationError, match="agent 'a': budget must be a Budget, not dict"):
        Agent(name="a", model="echo", budget={"tokens": 10})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="agent 'a': retry must be a RetryPolicy, not int"):
        Agent(name="a", model="echo", retry=3)  # type: ignore[arg-type]


def looping_model(calls: list[int]) -> FunctionModel:
    """Looks something up on every call: never ends its turn on its own."""

    def reply(messages: list[dict[str, Any]], specs: list[dict[str, Any]]) -> Any:
        calls.append(1)
        return ToolCall("look", {"q": str(len(calls))})

    return FunctionModel(reply, name="function:loop")


@tool
def look(q: str) -> str:
    """Look something up.

    Args:
        q: what.
    """
    return f"found {q}"


def test_a_spent_budget_stops_before_the_next_model_call_and_rolls_the_turn_back():
    calls: list[int] = []
    agent = Agent(name="a", model="echo", tools=[look])
    agent("first")  # a finished turn before: kept
    before = list(agent.messages)
    agent.model = looping_model(calls)
    agent.budget = Budget(model_calls=3)
    with pytest.raises(BudgetExceededError) as caught:
        agent("loop")
    assert len(calls) == 3  # never over model_calls
    error = caught.value
    assert (error.limit, error.allowed, error.spent, error.scope) == ("model_calls", 3, 3, "agent 'a'")
    assert str(error) == (
        "BudgetExceeded: agent 'a' spent its model_calls budget (3 of 3); its turn was rolled back: invoke it "
        "again with a larger budget"
    )
    assert agent.messages == before
    assert history_problems(agent.messages) == []


@pytest.mark.parametrize(
    ("budget", "limit"),
    [
        (Budget(tokens=1), "tokens"),
        (Budget(cost_usd=0.000001, prices={"function:*": Price(input=1.0, output=1.0)}), "cost_usd"),
        (Budget(wall_seconds=0), "wall_seconds"),
    ],
)
def test_each_limit_stops_the_invocation_and_says_which(budget, limit):
    calls: list[int] = []
    agent = Agent(name="a", model=looping_model(calls), tools=[look], budget=budget)
    with pytest.raises(BudgetExceededError) as caught:
        agent("loop")
    assert caught.value.limit == limit
    assert f"spent its {limit} budget" in str(caught.value)
    assert agent.messages == []


def test_a_cost_budget_without_a_price_is_refused_naming_the_model():
    agent = Agent(name="a", model=looping_model([]), tools=[look], budget=Budget(cost_usd=1.0))
    with pytest.raises(ConfigurationError, match="no price for model 'function:loop'"):
        agent("loop")


def test_the_budget_caps_each_invocation_and_can_be_changed_between_them():
    agent = Agent(name="a", model="echo", budget=Budget(model_calls=1))
    for turn in range(3):
        assert str(agent(f"hi {turn}")) == f"echo: hi {turn}"  # each counts from zero
    agent.budget = Budget(model_calls=0)
    with pytest.raises(BudgetExceededError):
        agent("once more")
    agent.budget = None
    assert str(agent("once more")) == "echo: once more"


async def test_with_a_session_a_stopped_turn_is_not_stored_and_a_larger_budget_runs_it():
    storage = InMemoryStorage()
    agent = await session_agent(storage, Budget(model_calls=1))
    await agent.invoke_async("hello")
    stored = list(agent.messages)
    agent.model = lookup_then_answer()
    with pytest.raises(BudgetExceededError):
        await agent.invoke_async("look it up")
    # Nothing of what a budget spent is saved: the session holds what it held before the stopped turn.
    reloaded = await session_agent(storage, Budget(model_calls=1))
    assert reloaded.messages == stored

    reloaded.model = lookup_then_answer()
    reloaded.budget = Budget(model_calls=2)
    assert str(await reloaded.invoke_async("look it up")) == "found it"
    assert history_problems((await session_agent(storage, None)).messages) == []


async def session_agent(storage: InMemoryStorage, budget: Budget | None) -> Agent:
    manager = SnapshotSessionManager("s", storage=storage)
    return await Agent.create(model="echo", tools=[look], budget=budget, session_manager=manager)


def lookup_then_answer() -> FunctionModel:
    replies = iter([ToolCall("look", {"q": "x"}), "found it"])
    return FunctionModel(lambda messages, specs: next(replies), name="function:two")


def flaky(failures: list[BaseException], calls: list[int], then: Any = "ok") -> FunctionModel:
    """Raises each of ``failures`` in turn, then answers ``then``."""

    def reply(messages: list[dict[str, Any]], specs: list[dict[str, Any]]) -> Any:
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return then(messages) if callable(then) else then

    return FunctionModel(reply, name="function:flaky")


def test_a_throttled_model_call_is_made_again_and_the_turn_goes_on():
    calls: list[int] = []
    agent = Agent(
        model=flaky([ModelThrottledError("slow down"), ModelThrottledError("slow down")], calls),
        retry=RetryPolicy(max_attempts=3, **FAST),
    )
    result = agent("hi")
    assert str(result) == "ok"
    assert len(calls) == 3
    assert result.metrics.cycles == 1  # one model call, tried three times
    assert agent.messages == [
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [{"text": "ok"}]},
    ]


def test_a_retry_runs_nothing_else_of_the_turn_again():
    ran: list[str] = []

    @tool
    def record(q: str) -> str:
        """Record.

        Args:
            q: what.
        """
        ran.append(q)
        return "noted"

    script = iter([ToolCall("record", {"q": "once"}), ModelThrottledError("busy"), "done"])

    def reply(messages: list[dict[str, Any]], specs: list[dict[str, Any]]) -> Any:
        step = next(script)
        if isinstance(step, BaseException):
            raise step
        return step

    agent = Agent(model=FunctionModel(reply), tools=[record], retry=RetryPolicy(**FAST))
    assert str(agent("go")) == "done"
    assert ran == ["once"]
    assert history_problems(agent.messages) == []


@pytest.mark.parametrize(
    ("policy", "error", "calls_made"),
    [
        (RetryPolicy(max_attempts=2, **FAST), ModelThrottledError("slow down"), 2),  # attempts spent
        (RetryPolicy(**FAST), ModelError("bad request"), 1),  # not in retry_on
        (RetryPolicy(retry_on=(Exception,), **FAST), ModelAuthenticationError("bad key"), 1),  # never retried
    ],
)
def test_what_a_policy_does_not_retry_raises_as_itself_and_rolls_the_turn_back(policy, error, calls_made):
    calls: list[int] = []
    agent = Agent(model=flaky([error] * 5, calls), retry=policy)
    with pytest.raises(type(error)):
        agent("hi")
    assert len(calls) == calls_made
    assert agent.messages == []


def test_without_a_policy_a_failed_call_raises_at_once():
    calls: list[int] = []
    agent = Agent(model=flaky([ModelThrottledError("slow down")], calls))
    with pytest.raises(ModelThrottledError):
        agent("hi")
    assert len(calls) == 1


def test_each_retried_call_counts_against_the_budget():
    calls: list[int] = []
    agent = Agent(
        name="a",
        model=flaky([ModelThrottledError("slow down")] * 5, calls),
        retry=RetryPolicy(max_attempts=5, **FAST),
        budget=Budget(model_calls=2),
    )
    with pytest.raises(BudgetExceededError, match="model_calls"):
        agent("hi")
    assert len(calls) == 2


def test_an_agents_own_budget_goes_with_it_into_a_graph():
    calls: list[int] = []
    agent = Agent(name="looper", model=looping_model(calls), tools=[look], budget=Budget(model_calls=2))
    result = Graph([agent], [])("go")
    assert result.status.value == "interrupted"  # a budget stop, as for a node's own budget
    assert result.interrupts == []
    assert "agent 'looper' spent its model_calls budget (2 of 2)" in str(result.reason)
    assert len(calls) == 2
