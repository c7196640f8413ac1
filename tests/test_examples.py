import json
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_quickstart_runs(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["quickstart.py"])
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "agent said: Recorded that you viewed your profile." in out
    assert "actions taken: 2, last: view profile" in out
    assert "messages in the history: 8" in out


PYTHON_EXAMPLES = [
    "review_loop",
    "fan_out",
    "support_swarm",
    "nested",
    "invoice_triage",
    "map_summaries",
    "flaky_retries",
    "budgeted_review",
    "sticky_support",
]


@pytest.mark.parametrize("name", PYTHON_EXAMPLES)
def test_python_examples_run(name, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [f"{name}.py"])
    runpy.run_path(str(EXAMPLES / "python" / f"{name}.py"), run_name="__main__")
    assert capsys.readouterr().out.startswith("completed")


@pytest.mark.parametrize("name", PYTHON_EXAMPLES)
def test_python_and_yaml_examples_are_the_same_pipeline(name):
    from orchestra import load

    module = runpy.run_path(str(EXAMPLES / "python" / f"{name}.py"))
    built = module["build"]()
    loaded = load(EXAMPLES / "graphs" / f"{name}.yaml")
    assert type(built) is type(loaded)
    assert set(built.nodes) == set(loaded.nodes)
    # The same shape: nodes, joins, entry points, edges and which edges have a condition. (The topology hashes differ
    # where they should: a Python condition and a YAML `when:` are different conditions by identity.)
    shape, same = built.structure(), loaded.structure()
    for structure in (shape, same):
        structure.pop("limits")  # the YAML loader's defaults (node_timeout) are not the constructor's
        structure["edges"] = sorted(
            [src, dst, bool(condition)] for src, dst, condition in structure.get("edges", [])
        )
    assert shape == same


def test_the_versioned_example_resumes_a_v1_run_on_v2(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["versioned.py"])
    runpy.run_path(str(EXAMPLES / "python" / "versioned.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "  v1: interrupted before the review, after ['draft']"
    assert lines[1] == "completed ['write', 'reviewer'] [{'from': 'v1', 'to': 'v2'}]"


def test_the_tracing_example_prints_the_span_tree():
    import subprocess

    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "python" / "traced_run.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "completed"
    assert lines[1].startswith("invoke_workflow fan-out")
    assert "  execute_node cost_analyst  (17 output tokens)" in lines
    assert "      chat scripted  (17 output tokens)" in lines


def test_the_mcp_example_calls_a_real_server():
    import subprocess

    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "python" / "mcp_tools.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "tools: calc_add, calc_picture",
        "the server answered: 42",
        "agent said: 19 + 23 = 42",
    ]


def test_the_agents_as_tools_example_delegates(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["agents_as_tools.py"])
    runpy.run_path(str(EXAMPLES / "python" / "agents_as_tools.py"), run_name="__main__")
    assert capsys.readouterr().out.splitlines() == [
        "tool said: Tides are caused mainly by the Moon's gravity.",
        "tool said: The note is accurate.",
        "assistant: Tides come mainly from the Moon's gravity (checked by the review pipeline).",
    ]


def test_the_exactly_once_example_resumes_after_ctrl_c(tmp_path):
    """Ctrl-C once an invoice is out, run again: the turn resumes and every invoice is sent once."""
    import json
    import signal
    import subprocess

    example = [sys.executable, str(EXAMPLES / "python" / "exactly_once_tools.py"), str(tmp_path / "state")]
    first = subprocess.Popen(example, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert first.stdout.readline().strip() == "sent the invoice for acme (120 EUR)"
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=60)
    assert "stopped half way: run me again to resume the turn" in out
    again = subprocess.run(example, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == "resuming the turn a stopped run left open"
    assert "All three invoices are out. (resumed)" in again.stdout
    outbox = [json.loads(line) for line in (tmp_path / "state" / "outbox.jsonl").read_text().splitlines()]
    assert sorted(entry["customer"] for entry in outbox) == ["acme", "globex", "initech"]


def test_the_protocol_doors_example_speaks_mcp_a2a_and_ag_ui():
    import subprocess

    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "python" / "protocol_doors.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        lines[0] == "mcp tools: assistant, memory_recall, release, support"
    )  # the agents, and memory recall
    assert lines[1].startswith("mcp: support answered: I found the duplicate charge")
    assert lines[2] == "a2a: assistant answered: echo: hello over A2A"
    assert lines[3].startswith("ag-ui: RUN_STARTED STATE_SNAPSHOT STEP_STARTED")
    assert lines[3].endswith("STEP_FINISHED RUN_FINISHED")


def test_the_approval_example_waits_for_a_human_then_publishes(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["approval.py"])
    runpy.run_path(str(EXAMPLES / "python" / "approval.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("interrupted int-d1349b40e82f20a3 approval {'draft': 'Release notes:")
    assert lines[1] == "completed ['draft', 'approve', 'approve', 'publish']"
    assert lines[2].startswith("published: Release notes:")


def test_the_approval_yaml_stops_with_the_id_its_header_names_and_resumes(tmp_path, monkeypatch):
    import re

    from typer.testing import CliRunner

    from orchestra.cli import app

    monkeypatch.chdir(tmp_path)
    spec = EXAMPLES / "graphs" / "approval.yaml"
    named = re.search(r"--respond (int-[0-9a-f]+)=", spec.read_text()).group(1)
    runner = CliRunner()
    stopped = runner.invoke(app, ["run", str(spec), "--session-id", "rel-1"])
    assert stopped.exit_code == 3, stopped.output
    assert f"--respond {named}=<json>" in stopped.stderr
    done = runner.invoke(app, ["resume", str(spec), "--session-id", "rel-1", "--respond", f'{named}="yes"'])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("published: Release notes:")
    refused = runner.invoke(app, ["run", str(spec), "--session-id", "rel-2"])
    no = runner.invoke(app, ["resume", str(spec), "--session-id", "rel-2", "--respond", f'{named}="no"'])
    assert (refused.exit_code, no.exit_code) == (3, 0)
    assert no.stdout.strip() == "not published: the answer was 'no'"


def test_python_and_yaml_approval_are_the_same_pipeline():
    from orchestra import load

    built = runpy.run_path(str(EXAMPLES / "python" / "approval.py"))["build"]()
    loaded = load(EXAMPLES / "graphs" / "approval.yaml")
    assert set(built.nodes) == set(loaded.nodes)
    assert sorted((e.src, e.dst) for e in built.edges) == sorted((e.src, e.dst) for e in loaded.edges)


def test_the_encryption_example_stores_no_plaintext_and_loads(capsys, monkeypatch):
    monkeypatch.delenv("ORCHESTRA_ENCRYPTION_KEYS", raising=False)
    monkeypatch.setattr(sys, "argv", ["encrypted_sessions.py"])
    runpy.run_path(str(EXAMPLES / "python" / "encrypted_sessions.py"), run_name="__main__")
    assert capsys.readouterr().out.splitlines() == [
        "secret on disk: False",
        "messages restored: 2 - my passport number is X1234567",
    ]


def test_the_strands_example_makes_a_session_the_cli_imports(tmp_path, monkeypatch):
    pytest.importorskip("strands", reason="pip install -e '.[interop]' (the real Strands Agents SDK)")
    from typer.testing import CliRunner

    from orchestra.cli import app

    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(EXAMPLES / "python" / "strands_session.py"))["main"]()
    snapshot = "./strands/session/chat/scopes/agent/bot/snapshots/snapshot_latest.json"
    imported = CliRunner().invoke(app, ["sessions", "import", snapshot, "--from", "strands"])
    assert imported.exit_code == 0, imported.output
    assert imported.stdout.strip() == "imported agent/bot into session chat"
    shown = CliRunner().invoke(app, ["sessions", "show", "chat", "--json"])
    assert json.loads(shown.stdout)[0]["id"] == "bot"


def test_the_tool_approval_example_edits_rejects_and_approves_always(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tool_approval.py"])
    runpy.run_path(str(EXAMPLES / "python" / "tool_approval.py"), run_name="__main__")
    assert capsys.readouterr().out.splitlines() == [
        "agent: refunded 40 EUR on A-1",
        "asked: issue_refund {'order': 'A-2', 'amount': 900}",
        "agent: refunded 90 EUR on A-2",
        "asked: issue_refund {'order': 'A-3', 'amount': 500}",
        "agent: Error: a human rejected this call of 'issue_refund': A-3 was already refunded",
        "asked: issue_refund {'order': 'A-4', 'amount': 150}",
        "agent: refunded 150 EUR on A-4",
        "agent: refunded 300 EUR on A-5",  # "always", remembered by the reloaded session
        "refunds: ['A-1: 40 EUR', 'A-2: 90 EUR', 'A-4: 150 EUR', 'A-5: 300 EUR']",
    ]


def test_the_daily_report_example_serves_its_schedule_and_runs_it_now(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["daily_report.py"])
    runpy.run_path(str(EXAMPLES / "server" / "daily_report.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "schedule daily-report: 0 7 * * * (Europe/Paris), next at 07:00 CE" in out  # CET or CEST
    assert "run completed: echo: Write the report for 20" in out
    assert "'schedule_id': 'daily-report'" in out


def test_the_support_agent_remembers_a_customer_across_sessions(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["support_memory.py"])
    runpy.run_path(str(EXAMPLES / "python" / "support_memory.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "tuesday: From your file: I am on the gold plan and prefer email." in out
    assert "context given to the model: - preferences: I am on the gold plan and prefer email." in out
    assert "another customer: Your file is empty." in out
    assert out.endswith("completed: the agent remembered Ana across sessions, and Bob saw none of it\n")


def test_the_order_example_waits_for_its_payment_and_ships_once(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["order_payment.py"])
    runpy.run_path(str(EXAMPLES / "python" / "order_payment.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("  interrupted: waiting for the event 'payment' (deadline ")
    assert lines[1] == (
        "completed shipped order 7: two lamps (paid 42 EUR) ['reserve', 'payment', 'payment', 'ship']"
    )
