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
    assert lines[0] == "mcp tools: assistant, release, support"  # the sample config's agents
    assert lines[1].startswith("mcp: support answered: I found the duplicate charge")
    assert lines[2] == "a2a: assistant answered: echo: hello over A2A"
    assert lines[3].startswith("ag-ui: RUN_STARTED STATE_SNAPSHOT STEP_STARTED")
    assert lines[3].endswith("STATE_SNAPSHOT RUN_FINISHED")
