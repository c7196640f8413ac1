"""Retry policies per node and per agent: what is retried, what never is, and attempts that survive a resume."""

import pytest

from orchestra import Agent, load, tool
from orchestra.errors import (
    ConfigurationError,
    ModelError,
    ModelThrottledError,
    ModelUnavailableError,
    OrchestraSpecError,
)
from orchestra.history import history_problems
from orchestra.multiagent import DEFAULT_RETRY, Graph, RetryPolicy, Swarm
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel, ToolCall

FAST = {"initial_interval": 0.001, "jitter": 0}


def failing_model(errors):
    """A model that raises each of ``errors`` in turn, then answers."""
    calls = []

    def reply(messages, specs):
        calls.append(len(messages))
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "answered"

    return FunctionModel(reply), calls


@pytest.mark.parametrize("error", [ModelThrottledError("429"), ModelUnavailableError("503")])
def test_by_default_throttling_and_passing_provider_faults_are_retried(error):
    model, calls = failing_model([error, error])
    # The default's errors and attempts, with shorter waits (the default waits 1 s, then 2 s).
    graph = Graph([Agent(name="a", model=model)], retry=RetryPolicy(**FAST))
    assert RetryPolicy(**FAST).retry_on == DEFAULT_RETRY.retry_on
    result = graph("go")
    assert result.status.value == "completed"
    assert len(calls) == 3
    assert [a["attempt"] for a in graph.document.node("a")["attempts"]] == [1, 2]


def test_the_default_policy_retries_only_those_model_errors():
    assert DEFAULT_RETRY.retries(ModelThrottledError("x"))
    assert DEFAULT_RETRY.retries(ModelUnavailableError("x"))
    assert not DEFAULT_RETRY.retries(ModelError("bad request"))
    assert not DEFAULT_RETRY.retries(RuntimeError("a node's own bug"))
    model, calls = failing_model([ModelError("400 bad request")])
    result = Graph([Agent(name="a", model=model)])("go")
    assert result.status.value == "failed"
    assert len(calls) == 1


def test_configuration_errors_are_never_retried_whatever_retry_on_says():
    tries = []

    def broken(node_input):
        tries.append(node_input.attempt)
        raise ConfigurationError("no model named 'gpt-nope'")

    graph = Graph({"broken": broken}, retry=RetryPolicy(max_attempts=5, retry_on=(Exception,), **FAST))
    result = graph("go")
    assert result.status.value == "failed"
    assert tries == [1]
    assert result.reason == "node 'broken' failed: ConfigurationError: no model named 'gpt-nope'"


def test_when_attempts_run_out_the_error_says_so():
    def always(node_input):
        raise ConnectionError(f"down on attempt {node_input.attempt}")

    graph = Graph(
        {"n": always}, retry={"n": RetryPolicy(max_attempts=2, retry_on=(ConnectionError,), **FAST)}
    )
    result = graph("go")
    assert result.reason == "node 'n' failed: ConnectionError: down on attempt 2 (attempt 2 of 2)"


def test_a_retried_agent_starts_again_from_its_state_before_the_node():
    turns = []

    def reply(messages, specs):
        turns.append(len(messages))
        if len(turns) == 2:  # after a tool call: the attempt fails half way through its turn
            raise ModelThrottledError("429")
        if messages[-1]["role"] == "user" and "toolResult" in messages[-1]["content"][0]:
            return "done"
        return ToolCall("lookup", {"q": "x"})

    from orchestra import tool

    @tool
    def lookup(q: str) -> str:
        """Look something up.

        Args:
            q: what.
        """
        return "found"

    agent = Agent(name="a", model=FunctionModel(reply), tools=[lookup])
    result = Graph([agent], retry=RetryPolicy(**FAST))("go")
    assert result.status.value == "completed"
    assert turns == [1, 3, 1, 3]  # the second attempt started from the empty history, not from half a turn
    assert history_problems(agent.messages) == []
    assert len(agent.messages) == 4


def test_a_timeout_is_retried_when_the_policy_says_so():
    import time

    def slow_then_fast(node_input):
        if node_input.attempt == 1:
            time.sleep(0.5)
        return "fast"

    graph = Graph(
        {"n": slow_then_fast},
        node_timeout=0.1,
        retry=RetryPolicy(retry_on=(TimeoutError,), **FAST),
    )
    result = graph("go")
    assert result.output == "fast"
    assert graph.document.node("n")["attempts"][0]["error"] == "node_timeout (0.1s) exceeded by node 'n'"


def test_attempts_are_saved_and_a_resume_goes_on_with_the_next_one():
    store = InMemoryStorage()
    seen = []

    def step(node_input):
        seen.append(node_input.attempt)
        raise ConnectionError("still down")

    policy = RetryPolicy(max_attempts=3, retry_on=(ConnectionError,), **FAST)
    first = Graph({"n": step}, retry=policy, session_manager=SnapshotSessionManager("s", storage=store))
    assert first("go").status.value == "failed"
    assert seen == [1, 2, 3]
    # The run failed with its attempts spent: a resume is a new try, with a fresh set of attempts.
    again = Graph({"n": step}, retry=policy, session_manager=SnapshotSessionManager("s", storage=store))
    assert again().status.value == "failed"
    assert seen == [1, 2, 3, 1, 2, 3]
    record = again.document.node("n")
    assert [(a["execution"], a["attempt"]) for a in record["attempts"]] == [(2, 1), (2, 2)]


def test_each_swarm_agent_has_its_own_policy():
    model, calls = failing_model([ModelUnavailableError("503")])

    def triage(messages, specs):
        return ToolCall("handoff_to_agent", {"agent_name": "billing", "message": "refund"})

    swarm = Swarm(
        [Agent(name="triage", model=FunctionModel(triage)), Agent(name="billing", model=model)],
        retry={"billing": RetryPolicy(**FAST)},
    )
    result = swarm("help")
    assert result.status.value == "completed"
    assert result.node_history == ["triage", "billing"]
    assert len(calls) == 2
    assert swarm.document.node("billing")["attempts"][0]["error"] == "ModelUnavailableError: 503"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"backoff": 0.5}, "backoff must be at least 1"),
        ({"initial_interval": 5, "max_interval": 1}, "max_interval .* is shorter than initial_interval"),
        ({"jitter": 2}, "jitter is a fraction"),
        ({"retry_on": ("nope",)}, "not an exception type"),
    ],
)
def test_a_bad_policy_is_refused(options, message):
    with pytest.raises(ConfigurationError, match=message):
        RetryPolicy(**options)


def test_waits_back_off_up_to_the_cap_with_jitter_below_them():
    policy = RetryPolicy(initial_interval=1, backoff=2, max_interval=5, jitter=0.5)
    assert [policy.interval(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    for attempt in range(1, 6):
        wait = policy.delay(attempt)
        assert policy.interval(attempt) * 0.5 <= wait <= policy.interval(attempt)
    assert RetryPolicy.from_json(policy.to_json()) == policy


def test_yaml_retry_policies_per_node_agent_and_pipeline(tmp_path):
    (tmp_path / "p.yaml").write_text(
        """
version: 1
kind: graph
id: p
retry: {max_attempts: 2}
agents:
  - name: writer
    retry: {max_attempts: 4, retry_on: [model_error, timeout]}
    model: {provider: function, function: 'tests.support:reply_fn'}
nodes:
  - agent: writer
  - {id: step, function: 'tests.orchestration_steps:mark', retry: {max_attempts: 5, initial_interval: 0.5, retry_on: ['builtins:ConnectionError']}}
  - {id: plain, function: 'tests.orchestration_steps:mark'}
edges:
  - {from: writer, to: step}
  - {from: step, to: plain}
"""
    )
    graph = load(tmp_path / "p.yaml")
    assert graph.nodes["writer"].retry.max_attempts == 4
    assert graph.nodes["writer"].retry.retry_on == (ModelError, TimeoutError)
    assert graph.nodes["step"].retry.retry_on == (ConnectionError,)
    assert graph.nodes["plain"].retry.max_attempts == 2


def test_a_yaml_retry_on_that_names_nothing_is_a_positioned_error(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "version: 1\nkind: graph\nid: p\nnodes:\n  - id: step\n    function: 'tests.orchestration_steps:mark'\n"
        "    retry: {retry_on: [throttled]}\n"
    )
    with pytest.raises(
        OrchestraSpecError,
        match=r"p.yaml:7:\d+: nodes\[0\].retry.retry_on: retry_on: unknown error kind 'throttled'",
    ):
        load(tmp_path / "p.yaml")


@pytest.mark.parametrize("orchestrator", ["graph", "graph with a session", "swarm"])
def test_a_retried_node_resumes_its_turn_and_runs_a_side_effect_once(orchestrator):
    # The model is throttled after the payment ran: the retry resumes the node's open turn (the recorded
    # result stands) instead of starting over and paying again.
    paid: list[int] = []
    calls: list[int] = []

    @tool(effects=True)
    def pay(amount: int) -> str:
        """Pay.

        Args:
            amount: how much.
        """
        paid.append(amount)
        return "paid"

    def reply(messages, tool_specs):
        calls.append(len(messages))
        if len(calls) == 2:
            raise ModelThrottledError("429 after the payment")
        if "toolResult" in messages[-1]["content"][0]:
            return "done"
        return ToolCall("pay", {"amount": 5}, tool_use_id=f"call_{len(calls)}")

    agent = Agent(name="payer", model=FunctionModel(reply), tools=[pay])
    if orchestrator == "swarm":
        result = Swarm([agent], retry=RetryPolicy(**FAST))("go")
    else:
        session = (
            SnapshotSessionManager("s", storage=InMemoryStorage()) if "session" in orchestrator else None
        )
        result = Graph([agent], retry=RetryPolicy(**FAST), session_manager=session)("go")
    assert result.status.value == "completed"
    assert paid == [5]
    assert not history_problems(agent.messages)
