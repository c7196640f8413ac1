"""What a newcomer's mistakes get: one line that says what happened and what to do, the documented exit
code, and machine-readable output that holds nothing else (issue 30)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

import orchestra
from orchestra.cli import app
from orchestra.cli._render import NodeTable
from orchestra.multiagent import GraphBuilder
from orchestra.multiagent.events import NodeStartEvent
from orchestra.server import hash_key
from tests.cli.pipelines import CHAIN

runner = CliRunner()
EXAMPLES = Path(__file__).parents[2] / "examples" / "graphs"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0")
    (tmp_path / "chain.yaml").write_text(CHAIN)
    return tmp_path


def invoke(*args: object, input: str | None = None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def test_version_is_the_installed_distributions():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"orchestra-agents {version('orchestra-agents')}"
    assert version("orchestra-agents") == orchestra.__version__


def test_resuming_a_completed_run_names_result_and_run_and_draws_nothing(workdir):
    assert invoke("run", "chain.yaml", "--session-id", "done").exit_code == 0
    result = invoke("resume", "chain.yaml", "--session-id", "done")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no table of pending nodes
    assert "the run of session done already completed: nothing to resume" in result.stderr
    assert "orchestra result chain.yaml --session-id done" in result.stderr
    assert "orchestra run chain.yaml --session-id done" in result.stderr


def test_resuming_an_unknown_session_names_run(workdir):
    result = invoke("resume", "chain.yaml", "--session-id", "nosuch", "--storage", "file:./store")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "session nosuch has no run of graph 'chain' in file:./store to resume" in result.stderr
    assert "orchestra run chain.yaml --session-id nosuch --storage file:./store" in result.stderr


def test_sessions_commands_on_an_unknown_session_exit_1(workdir):
    deleted = invoke("sessions", "delete", "nosuch", "--yes")
    assert deleted.exit_code == 1
    assert "no session nosuch in file:./.orchestra: nothing to delete" in deleted.stderr
    history = invoke("sessions", "history", "nosuch")
    assert history.exit_code == 1
    assert history.stderr == (
        "error: no session 'nosuch' in file:./.orchestra: see the sessions there with orchestra sessions "
        "list\n"
    )
    assert history.stdout == ""  # no empty table


@pytest.mark.parametrize("command", [["history"], ["export"], ["show"], ["restore", "01a22a0a"]])
def test_a_session_that_is_not_there_is_named_with_its_storage(workdir, command):
    """Not "session 'nosuch' has no agent 'default'" (issue 35, item 20): the storage holds no such session."""
    name, *rest = command
    result = invoke("sessions", name, "nosuch", *rest, "--storage", "file:./store")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: no session 'nosuch' in file:./store: see the sessions there with orchestra sessions list "
        "--storage file:./store"
    ), result.stderr


def test_a_session_without_the_scope_asked_for_names_its_scopes(workdir):
    assert invoke("run", "chain.yaml", "--session-id", "c1").exit_code == 0
    history = invoke("sessions", "history", "c1")
    assert history.exit_code == 1
    assert "session 'c1' has no agent 'default': see its scopes with orchestra sessions show c1" in (
        history.stderr
    )


@pytest.mark.parametrize(
    ("uri", "hint"),
    [("memroy", "did you mean memory?"), ("sqllite:./x.db", "did you mean sqlite?"), ("mydir", "file:mydir")],
)
def test_a_typod_storage_is_refused_and_creates_nothing(workdir, uri, hint):
    result = invoke("run", "chain.yaml", "--storage", uri)
    assert result.exit_code == 1
    assert f"unknown storage URI {uri!r}" in result.stderr
    assert hint in result.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["chain.yaml"]


def test_a_path_is_still_a_folder(workdir):
    assert invoke("run", "chain.yaml", "--storage", "./store").exit_code == 0
    assert (workdir / "store").is_dir()


def test_input_from_a_file_and_a_file_name_refused(workdir):
    missing = invoke("run", "chain.yaml", "--input", "missing.txt")
    assert missing.exit_code == 2
    assert "looks like a file name (no such file here): write --input @missing.txt" in missing.stderr
    absent = invoke("run", "chain.yaml", "--input", "@missing.txt")
    assert absent.exit_code == 2
    assert "cannot read missing.txt" in absent.stderr
    (workdir / "task.txt").write_text("from a file")
    read = invoke("run", "chain.yaml", "--input", "@task.txt", "--json")
    assert read.exit_code == 0, read.output
    assert json.loads(read.stdout)["status"] == "completed"
    sentence = invoke("run", "chain.yaml", "--input", "Summarize notes.txt please", "--json")
    assert sentence.exit_code == 0  # a sentence that mentions a file is a task


def test_a_temporal_target_without_a_task_queue_is_refused_at_once(workdir):
    result = invoke("run", "chain.yaml", "--on", "temporal://127.0.0.1:1/default")
    assert result.exit_code == 1
    assert "names no task queue: add ?task_queue=QUEUE" in result.stderr


def test_run_takes_the_temporal_connection_flags_worker_takes():
    for command in ("run", "resume", "worker"):
        help_text = invoke(command, "--help").stdout
        for flag in ("--tls", "--tls-cert", "--tls-key", "--tls-ca", "--api-key"):
            assert flag in help_text, (command, flag)


def test_help_shows_the_extra_in_brackets():
    help_text = invoke("run", "--help").stdout
    assert "orchestra-agents[otel]" in " ".join(help_text.replace("│", " ").split())


def test_serve_on_a_busy_port_says_so_and_exits_1(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text(
        f"version: 1\nstorage: memory\nagents: []\napi_keys: [{{workspace: w, sha256: {hash_key('k')}}}]\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke("serve", config, "--port", port)
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "serving" not in result.stderr


def test_json_logs_keep_stderr_json_and_the_table_away(workdir):
    result = invoke("--log-format", "json", "run", "chain.yaml", "--storage", "memroy")
    assert result.exit_code == 1
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert records[0]["level"] == "error"
    assert records[0]["event"].startswith("error: unknown storage URI 'memroy'")
    ran = invoke("--log-format", "json", "-v", "run", "chain.yaml", "--session-id", "j1")
    assert ran.exit_code == 0
    for line in ran.stderr.splitlines():
        json.loads(line)  # every line: the session line, log records; no table


def test_without_a_terminal_no_table_runs_into_the_error_line(workdir):
    result = invoke("run", "chain.yaml", "--storage", "file:./store", "--session-id", "t1")
    assert result.exit_code == 0
    assert "┏" not in result.stderr
    assert "pending" not in result.stderr


def test_the_live_table_counts_a_running_nodes_seconds(monkeypatch):
    clock = iter([100.0, 102.5])
    monkeypatch.setattr("orchestra.cli._render.time.perf_counter", lambda: next(clock))
    graph = GraphBuilder().add_node(lambda task: "x", node_id="step").build()
    table = NodeTable(graph)
    table.update(NodeStartEvent(node_id="step", execution_count=1))
    rendered = table.render()
    assert list(rendered.columns[3].cells) == ["2.50"]


def test_the_live_display_redraws_from_the_table(monkeypatch, workdir):
    """Live is given the table's render function, so each refresh (not only each event) redraws it."""
    seen: dict[str, object] = {}

    class Recording:
        def __init__(self, *args, **kwargs):
            seen.update(kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr("orchestra.cli._run.Live", Recording)
    monkeypatch.setattr("orchestra.cli._run.live_display", lambda: True)
    assert invoke("run", "chain.yaml", "--session-id", "l1").exit_code == 0
    render = seen["get_renderable"]
    assert getattr(render, "__func__", None) is NodeTable.render


def test_bedrock_without_a_region_names_the_variables(monkeypatch, tmp_path):
    from orchestra.errors import ConfigurationError
    from orchestra.models.bedrock import BedrockModel

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(ConfigurationError, match="needs an AWS region: set AWS_REGION"):
        BedrockModel("m")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")  # botocore alone reads AWS_DEFAULT_REGION only
    assert BedrockModel("m").client.meta.region_name == "eu-west-3"


def test_an_openai_model_without_a_key_is_refused_before_anything_runs(workdir, monkeypatch):
    """Issue 35, item 24: --model openai:... with no OPENAI_API_KEY is one line naming the variable."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # should a request be tried: not the internet
    result = invoke(
        "run", EXAMPLES / "review_loop.yaml", "--model", "openai:gpt-4o-mini", "--session-id", "k"
    )
    assert result.exit_code == 1
    assert result.stderr == (
        "error: openai:gpt-4o-mini at https://api.openai.com/v1 needs an API key: set OPENAI_API_KEY (or "
        "pass api_key=); for a local server that needs none, give its base_url (or use ollama:<model>)\n"
    )
    assert json.loads(invoke("sessions", "list", "--json").stdout) == []  # refused before the run started


def test_a_failed_python_run_prints_why():
    from orchestra import Agent, FunctionModel

    def broken(messages, tools):
        raise RuntimeError("no model here")

    graph = GraphBuilder().add_node(Agent(name="researcher", model=FunctionModel(broken))).build()
    result = graph("go")
    assert str(result).startswith("failed: node 'researcher' failed:")
    assert "no model here" in str(result)


def test_the_temporal_cores_logs_go_to_python_logging():
    temporalio = pytest.importorskip("temporalio", reason="the temporal extra (in .[dev])")
    assert temporalio
    code = (
        "from orchestra.cli._temporal import CORE_LOGGER, core_logs_to_logging\n"
        "from temporalio.runtime import Runtime\n"
        "telemetry = core_logs_to_logging()\n"
        "assert telemetry.logging.forwarding.logger.name == CORE_LOGGER\n"
        "Runtime.default()\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_example_mcp_server_names_its_own_path():
    header = (Path(__file__).parents[2] / "examples" / "mcp" / "calculator_server.py").read_text()[:400]
    assert "examples/mcp/calculator_server.py" in header
