"""The orchestra command: every command, its output and its exit code (in-process, through typer)."""

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.history import history_problems
from orchestra.spec import build, parse_file
from tests.cli.pipelines import AGENT, CHAIN, FAILING, HUMAN, PAYER

EXAMPLES = Path(__file__).parent.parent.parent / "examples" / "graphs"
runner = CliRunner()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0")
    return tmp_path


def invoke(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def spec(workdir, name, text):
    path = workdir / name
    path.write_text(text)
    return path


def test_run_prints_the_output_and_exits_0(workdir):
    result = invoke("run", EXAMPLES / "fan_out.yaml", "--session-id", "s1")
    assert result.exit_code == 0, result.output
    assert "Move to spot instances, and make every job resumable first." in result.stdout
    assert "session: s1" in result.stderr


def test_run_json_and_input_from_stdin(workdir):
    result = invoke(
        "run",
        EXAMPLES / "support_swarm.yaml",
        "--input",
        "-",
        "--json",
        "--session-id",
        "s2",
        input="my card was charged twice",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "completed"
    assert data["session_id"] == "s2"
    assert data["node_history"] == ["triage", "billing"]


def test_run_with_a_model_override(workdir):
    result = invoke("run", spec(workdir, "agent.yaml", AGENT), "--input", "ping", "--model", "echo")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "echo: ping"


def test_run_a_single_agent(workdir):
    result = invoke("run", spec(workdir, "agent.yaml", AGENT), "--input", "hi", "--session-id", "a1")
    assert result.exit_code == 0
    assert result.stdout.strip() == "hello from the agent"
    assert (workdir / ".orchestra/session/a1/scopes/agent/default").is_dir()


def test_run_needs_an_input(workdir):
    result = invoke("run", spec(workdir, "agent.yaml", AGENT))
    assert result.exit_code == 2
    assert "has no input" in result.stderr


def test_an_invalid_spec_exits_1_with_every_error(workdir):
    bad = spec(workdir, "bad.yaml", "version: 1\nkind: graph\nid: g\nnodez: []\nlimits: {max_nodes: 1}\n")
    for command in ("run", "validate"):
        result = invoke(command, bad)
        assert result.exit_code == 1
        assert "bad.yaml:4:8: nodez: unknown key 'nodez' (did you mean 'nodes'?)" in result.stderr
        assert "bad.yaml:5:21: limits.max_nodes: unknown key" in result.stderr


def test_validate_a_good_spec(workdir):
    result = invoke("validate", EXAMPLES / "review_loop.yaml")
    assert result.exit_code == 0
    assert "valid graph 'review-loop'" in result.stdout


def test_a_failed_run_exits_1_and_resume_finishes_it(workdir, monkeypatch):
    path = spec(workdir, "failing.yaml", FAILING)
    result = invoke("run", path, "--session-id", "f1")
    assert result.exit_code == 1
    assert "node 'gate' failed: RuntimeError: not allowed yet" in result.stderr
    assert f"orchestra resume {path} --session-id f1" in result.stderr
    monkeypatch.setenv("ORCHESTRA_TEST_ALLOW", "1")
    result = invoke("resume", path, "--session-id", "f1", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["resumed"] is True
    assert data["output"] == "allowed"


def test_an_interrupt_exits_3_and_respond_resumes(workdir):
    path = spec(workdir, "human.yaml", HUMAN)
    result = invoke("run", path, "--session-id", "h1")
    assert result.exit_code == 3
    assert "approve" in result.stderr
    interrupt_id = next(w for w in result.stderr.split() if w.startswith("int-"))
    result = invoke("resume", path, "--session-id", "h1", "--respond", f'{interrupt_id}="yes"')
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "human said yes"


def test_an_agents_tool_interrupt_exits_3_and_respond_answers_it(workdir):
    path = spec(workdir, "payer.yaml", PAYER)
    result = invoke("run", path, "--input", "pay 5", "--session-id", "p1")
    assert result.exit_code == 3, result.output
    assert result.stdout == ""  # no output: the turn waits
    interrupt_id = next(w for w in result.stderr.split() if w.startswith("int-"))
    assert 'approval: {"amount": 5}' in result.stderr
    assert (
        f"Answer with: orchestra resume {path} --session-id p1 --respond {interrupt_id}=<json>"
        in result.stderr
    )

    # A resume without the answer changes nothing: the question again, exit 3.
    again = invoke("resume", path, "--session-id", "p1", "--json")
    assert again.exit_code == 3, again.output
    assert interrupt_id in again.stderr

    answered = invoke("resume", path, "--session-id", "p1", "--respond", f"{interrupt_id}=yes", "--json")
    assert answered.exit_code == 0, answered.output
    data = json.loads(answered.stdout)
    assert (data["status"], data["output"], data["interrupts"]) == ("completed", "Payment handled.", [])
    saved = build(parse_file(path), session_id="p1")
    assert saved.open_interrupts() == []
    assert history_problems(saved.messages) == []
    assert any(
        b.get("toolResult", {}).get("content") == [{"text": "paid 5"}]
        for m in saved.messages
        for b in m["content"]
    )

    # Nothing waits any more: resume says so, and what to do instead.
    done = invoke("resume", path, "--session-id", "p1")
    assert done.exit_code == 1
    assert "waits for no answer" in done.stderr
    assert f"orchestra run {path} --session-id p1 --input TEXT" in done.stderr


def test_an_agents_interrupt_as_json_says_interrupted(workdir):
    result = invoke("run", spec(workdir, "payer.yaml", PAYER), "--input", "pay 5", "--json")
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    assert (data["status"], data["output"], data["stop_reason"]) == ("interrupted", None, "interrupt")
    assert [(i["name"], i["reason"]) for i in data["interrupts"]] == [("approval", {"amount": 5})]


def test_resume_of_an_agent_session_that_does_not_exist_says_to_run_it(workdir):
    path = spec(workdir, "payer.yaml", PAYER)
    result = invoke("resume", path, "--session-id", "nope")
    assert result.exit_code == 1
    assert "session nope has no conversation of agent 'payer'" in result.stderr
    assert f"orchestra run {path} --session-id nope --input TEXT" in result.stderr


def test_resume_refuses_a_changed_graph_unless_forced(workdir, monkeypatch):
    path = spec(workdir, "failing.yaml", FAILING)
    invoke("run", path, "--session-id", "c1")
    path.write_text(
        FAILING.replace(
            "  - {from: first, to: gate}\n", "  - {from: first, to: gate}\n  - {from: first, to: extra}\n"
        ).replace("nodes:\n", "nodes:\n  - {id: extra, function: 'tests.support:spec_mark'}\n")
    )
    monkeypatch.setenv("ORCHESTRA_TEST_ALLOW", "1")
    result = invoke("resume", path, "--session-id", "c1")
    assert result.exit_code == 1
    assert "different graph" in result.stderr
    assert invoke("resume", path, "--session-id", "c1", "--force").exit_code == 0


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("mermaid", "reviewer -->|{'output_contains':'REVISE'}| writer"),
        ("dot", '"reviewer" -> "writer" [label="{\'output_contains\':\'REVISE\'}"];'),
        ("text", 'reviewer (agent) -> writer when {"output_contains":"REVISE"}'),
    ],
)
def test_graph_formats(fmt, expected):
    result = invoke("graph", EXAMPLES / "review_loop.yaml", "--format", fmt)
    assert result.exit_code == 0
    assert expected in result.stdout


def test_graph_rejects_an_unknown_format():
    result = invoke("graph", EXAMPLES / "review_loop.yaml", "--format", "png")
    assert result.exit_code == 2


def test_schema_prints_json_schema():
    result = invoke("schema")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["title"] == "orchestra pipeline spec, version 1"


def test_sessions_commands(workdir, monkeypatch):
    path = spec(workdir, "chain.yaml", CHAIN)
    assert invoke("run", path, "--session-id", "one").exit_code == 0
    assert (
        invoke("run", spec(workdir, "agent.yaml", AGENT), "--input", "hi", "--session-id", "two").exit_code
        == 0
    )

    listed = invoke("sessions", "list", "--json")
    assert listed.exit_code == 0
    assert {s["session_id"] for s in json.loads(listed.stdout)} == {"one", "two"}

    shown = invoke("sessions", "show", "one")
    assert shown.exit_code == 0
    assert "multiAgent/chain" in shown.stdout
    assert "status: completed" in shown.stdout

    exported = invoke("sessions", "export", "one", "--scope", "multiAgent/chain")
    assert exported.exit_code == 0
    assert json.loads(exported.stdout)["scope"] == "multiAgent"
    invoke("sessions", "export", "two", "-o", workdir / "two.json")
    assert (
        json.loads((workdir / "two.json").read_text())["data"]["messages"][1]["content"][0]["text"]
        == "hello from the agent"
    )

    assert invoke("sessions", "show", "nobody").exit_code == 1
    refused = invoke("sessions", "delete", "two", "--yes")  # saved a moment ago, by a writer it cannot see
    assert refused.exit_code == 1
    assert "may still have a live writer" in refused.stderr
    assert invoke("sessions", "delete", "two", "--yes", "--force").exit_code == 0
    assert {s["session_id"] for s in json.loads(invoke("sessions", "list", "--json").stdout)} == {"one"}

    time.sleep(1.1)
    recent = invoke("sessions", "prune", "--older-than", "1s", "--dry-run")
    assert "would delete 0 session(s)" in recent.stdout  # saved less than 10 minutes ago: may be live
    monkeypatch.setattr("orchestra.session.admin.LIVE_WRITER_WINDOW", timedelta(0))
    dry = invoke("sessions", "prune", "--older-than", "1s", "--dry-run")
    assert "would delete 1 session(s): one" in dry.stdout
    assert invoke("sessions", "prune", "--older-than", "7d").stdout.strip() == "deleted 0 session(s)"
    assert invoke("sessions", "prune", "--older-than", "7 days").exit_code == 2


def test_sessions_history_and_restore(workdir):
    from orchestra import Agent, ScriptedModel
    from orchestra.session import SnapshotSessionManager
    from orchestra.storage import LocalFileStorage

    manager = SnapshotSessionManager("hist", storage=LocalFileStorage(workdir / ".orchestra"))
    agent = Agent(model=ScriptedModel(["a", "b"]), session_manager=manager)
    agent("first")
    snapshot_id = anyio.run(
        lambda: manager.save_snapshot(agent, is_latest=False, app_data={"label": "one turn"})
    )
    agent("second")

    history = invoke("sessions", "history", "hist")
    assert history.exit_code == 0
    assert snapshot_id in history.stdout  # the full id, ready to paste
    as_json = json.loads(invoke("sessions", "history", "hist", "--json").stdout)
    assert [s["snapshot_id"] for s in as_json] == [snapshot_id]
    assert as_json[0]["app_data"] == {"label": "one turn"}
    restored = invoke("sessions", "restore", "hist", snapshot_id)
    assert restored.exit_code == 0, restored.output
    again = Agent(
        model=ScriptedModel([]),
        session_manager=SnapshotSessionManager("hist", storage=LocalFileStorage(workdir / ".orchestra")),
    )
    assert [m["content"][0]["text"] for m in again.messages] == ["first", "a"]


COMMANDS = [
    ["run"],
    ["resume"],
    ["validate"],
    ["graph"],
    ["schema"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "history"],
    ["sessions", "restore"],
    ["sessions", "export"],
    ["sessions", "delete"],
    ["sessions", "prune"],
    ["serve"],
    ["hash-key"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout


def test_json_logs_on_stderr(workdir):
    result = invoke("--log-format", "json", "-vv", "run", spec(workdir, "chain.yaml", CHAIN), "--json")
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert any(line.get("event") == "run.start" for line in lines)


def test_hash_key_prints_the_sha256():
    result = invoke("hash-key", "s3cret")
    assert result.exit_code == 0
    assert result.stdout.strip() == "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0"


def test_serve_refuses_a_bad_config(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("version: 1\nagents: []\n")
    result = invoke("serve", config)
    assert result.exit_code == 1
    assert "no api_keys" in result.stderr


def test_the_printed_resume_command_repeats_the_model(workdir):
    path = spec(workdir, "failing.yaml", FAILING)
    result = invoke("run", path, "--session-id", "m1", "--model", "echo", "--storage", "file:./elsewhere")
    assert result.exit_code == 1
    hint = next(line for line in result.stderr.splitlines() if "orchestra resume" in line)
    assert "--model echo" in hint
    assert "--storage file:./elsewhere" in hint
    assert result.stdout.strip() == ""  # a failed run prints no output, only its status


def test_empty_input_from_stdin_is_a_usage_error(workdir):
    result = invoke("run", EXAMPLES / "fan_out.yaml", "--input", "-", input="  \n")
    assert result.exit_code == 2
    assert "read nothing from stdin" in result.stderr


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(workdir, monkeypatch):
    import subprocess
    import sys

    path = spec(workdir, "agent.yaml", AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env["AWS_REGION"] = "us-east-1"
    (workdir / "broken-config").write_text("[default\nregion = x\n")  # botocore cannot parse it
    env["AWS_CONFIG_FILE"] = str(workdir / "broken-config")
    command = [
        sys.executable,
        "-c",
        "from orchestra.cli import main; main()",
        "run",
        str(path),
        "--model",
        "bedrock:m",
        "--input",
        "hi",
    ]
    plain = subprocess.run(command, capture_output=True, text=True, env=env, cwd=workdir, timeout=120)
    assert plain.returncode == 1
    lines = plain.stderr.strip().splitlines()
    assert len(lines) == 2, plain.stderr
    assert lines[0].startswith("error: ConfigParseError")
    assert "--debug" in lines[1]
    debug = subprocess.run(
        [*command, "--debug"], capture_output=True, text=True, env=env, cwd=workdir, timeout=120
    )
    assert "Traceback" in debug.stderr


def test_the_resume_table_shows_what_the_saved_run_completed(workdir, monkeypatch):
    path = spec(workdir, "failing.yaml", FAILING)
    assert invoke("run", path, "--session-id", "t1").exit_code == 1
    monkeypatch.setenv("ORCHESTRA_TEST_ALLOW", "1")
    monkeypatch.setattr("orchestra.cli._run.live_display", lambda: True)  # as on a terminal
    result = invoke("resume", path, "--session-id", "t1")
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.stderr.splitlines() if line.count("│") > 3}
    assert "completed" in rows["first"]
    assert "pending" not in result.stderr


def test_verbose_logs_carry_the_run_session_and_node_ids(workdir):
    path = spec(workdir, "chain.yaml", CHAIN)
    result = invoke("--log-format", "json", "-v", "run", path, "--session-id", "logged")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    starts = [line for line in lines if line["event"] == "node.start"]
    assert [line["node_id"] for line in starts] == ["s1", "s2", "s3", "s4", "s5", "s6"]
    assert {line["session_id"] for line in starts} == {"logged"}
    assert {line["orchestrator"] for line in starts} == {"chain"}
    assert len({line["run_id"] for line in starts}) == 1
    assert any(line["event"] == "run.end" and line["status"] == "completed" for line in lines)


def test_a_session_with_a_live_run_is_neither_deleted_nor_pruned(workdir):
    from orchestra.session.writer_lock import WriterLock
    from orchestra.storage import LocalFileStorage

    assert invoke("run", spec(workdir, "chain.yaml", CHAIN), "--session-id", "busy").exit_code == 0
    time.sleep(1.1)
    with WriterLock(LocalFileStorage(workdir / ".orchestra"), "busy"):  # as a live run holds it
        refused = invoke("sessions", "delete", "busy", "--yes")
        assert refused.exit_code == 1
        assert "is being run by process" in refused.stderr
        pruned = invoke("sessions", "prune", "--older-than", "1s")
        assert pruned.stdout.strip() == "deleted 0 session(s)"
    assert invoke("sessions", "delete", "busy", "--yes", "--force").exit_code == 0  # saved a moment ago


def test_sessions_commands_see_the_repository_layout_and_migrate_it(workdir):
    """Sessions of FileSessionManager (here recorded from Strands Agents 1.62) are listed, shown, exported
    into the snapshot layout (export, then import) and deleted like any other."""
    import shutil

    from orchestra import Agent
    from orchestra.session import SnapshotSessionManager
    from orchestra.storage import LocalFileStorage

    corpus = Path(__file__).parent.parent / "session" / "corpus" / "strands_1_62"
    shutil.copytree(corpus, workdir / ".orchestra")

    listed = {s["session_id"]: s for s in json.loads(invoke("sessions", "list", "--json").stdout)}
    assert set(listed) == {"conversation", "empty", "graph"}
    assert listed["conversation"]["layout"] == "repository"
    assert listed["conversation"]["scopes"] == ["agent/helper"]
    assert listed["conversation"]["updated_at"].startswith("20")

    shown = json.loads(invoke("sessions", "show", "conversation", "--json").stdout)
    assert shown == [{"kind": "agent", "id": "helper", "records": 4, "messages": 4, "state_keys": ["plan"]}]

    exported = invoke("sessions", "export", "conversation", "--scope", "agent/helper", "-o", "helper.json")
    assert exported.exit_code == 0, exported.output
    imported = invoke("sessions", "import", "helper.json", "--session-id", "migrated")
    assert imported.exit_code == 0, imported.output
    migrated = Agent(
        agent_id="helper",
        session_manager=SnapshotSessionManager("migrated", storage=LocalFileStorage(".orchestra")),
    )
    assert [m["role"] for m in migrated.messages] == ["user", "assistant", "user", "assistant"]
    assert migrated.messages[0]["content"][1]["image"]["source"]["bytes"].startswith(b"\x89PNG")
    assert migrated.state.get() == {"plan": {"step": 1}}

    refused = invoke("sessions", "prune-snapshots", "conversation", "--keep-snapshots", "1")
    assert refused.exit_code == 1
    assert "repository layout" in refused.stderr
    assert invoke("sessions", "delete", "conversation", "--yes").exit_code == 0
    assert not (workdir / ".orchestra" / "session_conversation").exists()
    time.sleep(1.1)
    pruned = invoke("sessions", "prune", "--older-than", "1s")  # not 'migrated': imported a moment ago
    assert "deleted 2 session(s): empty, graph" in pruned.stdout, pruned.output


def test_result_prints_a_finished_run_from_its_session_without_running_anything(workdir, monkeypatch):
    path = spec(workdir, "chain.yaml", CHAIN)
    ran = invoke("run", path, "--session-id", "done", "--json")
    assert ran.exit_code == 0, ran.output
    shown = invoke("result", path, "--session-id", "done", "--json")
    assert shown.exit_code == 0, shown.output
    live, stored = json.loads(ran.stdout), json.loads(shown.stdout)
    for key in ("status", "output", "execution_order", "usage", "session_id", "results"):
        assert stored[key] == live[key], key
    assert invoke("result", path, "--session-id", "done").stdout.strip() == str(live["output"])

    monkeypatch.delenv("ORCHESTRA_TEST_ALLOW", raising=False)
    failing = spec(workdir, "failing.yaml", FAILING)
    assert invoke("run", failing, "--session-id", "broken").exit_code == 1
    again = invoke("result", failing, "--session-id", "broken")
    assert again.exit_code == 1
    assert "failed:" in again.stderr
    assert "not allowed yet" in again.stderr

    missing = invoke("result", path, "--session-id", "nobody")
    assert missing.exit_code == 1
    assert "no multiAgent 'chain'" in missing.stderr
