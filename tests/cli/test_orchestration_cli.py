"""The budget flags of run and resume, the exit code of a spent budget, and what sessions show says of
budgets, retries and maps in progress."""

import json
import shlex

import pytest
from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.spec import build, parse_file
from tests.cli.pipelines import AGENT

runner = CliRunner()

CHAIN = """version: 1
kind: graph
id: chain
agents:
  - {name: a, model: {provider: function, function: 'tests.support:reply_fn'}}
  - {name: b, model: {provider: function, function: 'tests.support:reply_fn'}}
  - {name: c, model: {provider: function, function: 'tests.support:reply_fn'}}
nodes: [{agent: a}, {agent: b}, {agent: c}]
edges: [{from: a, to: b}, {from: b, to: c}]
"""

MAP_FAILING = """version: 1
kind: graph
id: fan
nodes:
  - {id: split, function: 'tests.orchestration_steps:split'}
  - id: each
    map: {node: 'tests.orchestration_steps:flaky', max_concurrency: 1}
    retry: {max_attempts: 2, initial_interval: 0.001, retry_on: [any]}
edges: [{from: split, to: each}]
"""


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0")
    return tmp_path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_a_spent_budget_exits_4_and_says_how_to_resume_with_a_larger_one(workdir):
    (workdir / "chain.yaml").write_text(CHAIN)
    stopped = invoke("run", "chain.yaml", "--input", "go", "--session-id", "s1", "--budget-calls", "1")
    assert stopped.exit_code == 4, stopped.output
    assert (
        "stopped: BudgetExceeded: run of graph 'chain' spent its model_calls budget (1 of 1)"
        in stopped.stderr
    )
    assert (
        "Resume it with a larger budget: orchestra resume chain.yaml --session-id s1 --budget-calls 2\n"
        in stopped.stderr
    )
    shown = json.loads(invoke("sessions", "show", "s1", "--json").stdout)[0]
    assert shown["status"] == "interrupted"
    assert shown["budget"] == {"model_calls": 1}
    assert shown["spent"]["model_calls"] == 1
    same = invoke("resume", "chain.yaml", "--session-id", "s1", "--budget-calls", "1")
    assert same.exit_code == 4
    done = invoke("resume", "chain.yaml", "--session-id", "s1", "--budget-calls", "5", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["status"] == "completed"
    assert data["execution_order"] == ["a", "b", "c"]


def hint(result) -> list[str]:
    """The resume command a stopped run printed, as words to invoke (without the leading orchestra)."""
    line = next(line for line in result.stderr.splitlines() if line.startswith("Resume it with"))
    return shlex.split(line.partition(": ")[2])[1:]


def test_the_resume_hint_raises_the_limit_that_was_hit_and_pasted_it_goes_on(workdir):
    """Issue 35, item 19: not "--budget-tokens 100000 --budget-calls 2 --budget-tokens N", which stopped
    again when pasted."""
    (workdir / "chain.yaml").write_text(CHAIN)
    first = invoke(
        "run",
        "chain.yaml",
        "--input",
        "go",
        "--session-id",
        "s1",
        "--budget-tokens",
        "100000",
        "--budget-calls",
        "1",
    )
    assert first.exit_code == 4, first.output
    resumed = invoke(
        "resume", "chain.yaml", "--session-id", "s1", "--budget-tokens", "100000", "--budget-calls", "2"
    )
    assert resumed.exit_code == 4, resumed.output
    assert "spent its model_calls budget (2 of 2)" in resumed.stderr
    pasted = hint(resumed)
    assert pasted == [
        "resume",
        "chain.yaml",
        "--session-id",
        "s1",
        "--budget-tokens",
        "100000",
        "--budget-calls",
        "4",
    ]
    done = invoke(*pasted, "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["execution_order"] == ["a", "b", "c"]


def test_result_prints_the_same_pasteable_hint_with_the_limits_the_run_ran_under(workdir):
    (workdir / "chain.yaml").write_text(CHAIN)
    stopped = invoke(
        "run",
        "chain.yaml",
        "--input",
        "go",
        "--session-id",
        "s1",
        "--budget-tokens",
        "100000",
        "--budget-calls",
        "2",
    )
    assert stopped.exit_code == 4
    shown = invoke("result", "chain.yaml", "--session-id", "s1")
    assert shown.exit_code == 4
    pasted = hint(shown)
    assert pasted == [
        "resume",
        "chain.yaml",
        "--session-id",
        "s1",
        "--budget-tokens",
        "100000",
        "--budget-calls",
        "4",
    ]
    assert invoke(*pasted).exit_code == 0


def test_an_agent_s_own_budget_is_raised_in_its_spec(workdir):
    (workdir / "chain.yaml").write_text(CHAIN.replace("name: b,", "name: b, budget: {model_calls: 0},"))
    stopped = invoke("run", "chain.yaml", "--input", "go", "--session-id", "s1", "--budget-calls", "9")
    assert stopped.exit_code == 4, stopped.output
    assert "agent 'b' spent its model_calls budget (0 of 0)" in stopped.stderr
    assert (
        "Raise that agent's budget (budget: in its spec), then resume: orchestra resume chain.yaml "
        "--session-id s1 --budget-calls 9\n" in stopped.stderr
    )


def test_a_cost_budget_needs_prices_and_takes_them_from_a_file(workdir):
    (workdir / "chain.yaml").write_text(CHAIN)
    refused = invoke("run", "chain.yaml", "--input", "go", "--budget-cost", "0.01")
    assert refused.exit_code == 1
    assert "no price for model 'function:reply_fn'" in refused.stderr
    (workdir / "prices.yaml").write_text("'function:*': {input: 1.0, output: 2.0}\n")
    ran = invoke(
        "run",
        "chain.yaml",
        "--input",
        "go",
        "--session-id",
        "s2",
        "--budget-cost",
        "0.01",
        "--prices",
        "prices.yaml",
    )
    assert ran.exit_code == 0, ran.output
    spent = json.loads(invoke("sessions", "show", "s2", "--json").stdout)[0]["spent"]
    assert spent["cost_usd"] == pytest.approx(
        (spent["input_tokens"] + 2 * spent["output_tokens"]) / 1_000_000
    )


def test_an_agents_budget_stops_its_turn_exits_4_and_a_larger_one_runs_it(workdir):
    capped = AGENT.replace("    model:", "    budget: {model_calls: 0}\n    model:")
    (workdir / "agent.yaml").write_text(capped)
    result = invoke("run", "agent.yaml", "--input", "hi", "--session-id", "a1")
    assert result.exit_code == 4, result.output
    assert "stopped: BudgetExceeded: agent 'helper' spent its model_calls budget (0 of 0)" in result.stderr
    # The hint is ready to paste: the limit that was hit, raised (doubled, and past what was spent).
    assert (
        "Run it again with a larger budget: orchestra run agent.yaml --session-id a1 --input TEXT --budget-calls 1"
        in (result.stderr)
    )
    assert result.stdout == ""
    result = invoke(
        "run", "agent.yaml", "--input", "hi", "--session-id", "a1", "--budget-calls", "1", "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["output"] == "hello from the agent"
    # The stopped turn left nothing in the session: one prompt, one answer.
    saved = build(parse_file(workdir / "agent.yaml"), session_id="a1")
    assert [m["role"] for m in saved.messages] == ["user", "assistant"]


def test_sessions_show_says_which_items_and_attempts_a_failed_map_left(workdir, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_ITEMS", "3")
    monkeypatch.setenv("ORCHESTRA_TEST_FAILS", "5")
    (workdir / "fan.yaml").write_text(MAP_FAILING)
    failed = invoke("run", "fan.yaml", "--input", "go", "--session-id", "s3")
    assert failed.exit_code == 1
    assert "item 0 failed: RuntimeError: each failed on attempt 2 (attempt 2 of 2)" in failed.stderr
    shown = json.loads(invoke("sessions", "show", "s3", "--json").stdout)[0]
    assert shown["maps"] == {"each": "0 of 3 items completed, 1 failed"}
    text = invoke("sessions", "show", "s3").stdout
    assert "  maps:\n    each: 0 of 3 items completed, 1 failed\n" in text
