"""Tool approval from the command line (issue 37 item 3): ``orchestra run`` stops at a tool's approval
question (exit 3, the tool and its arguments shown); ``orchestra resume --respond ID=<answer>`` answers
it with an edit, a rejection or "always", and an answer that does not fit is refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.spec import build, parse_file
from orchestra.tools.approval import ALWAYS_KEY
from tests.server.approval_agents import BANK, SENT

runner = CliRunner()


@pytest.fixture
def bank(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    SENT.clear()
    path = tmp_path / "bank.yaml"
    path.write_text(BANK)
    return path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def asked(bank, text: str) -> str:
    """Run ``text`` in session ``c``; the approval question's id (the run exits 3)."""
    result = invoke("run", bank, "--input", text, "--session-id", "c")
    assert result.exit_code == 3, result.output
    assert "tool_approval: send_money" in result.stderr
    assert '"decision": "edit"' in result.stderr  # how to answer
    return next(w for w in result.stderr.split() if w.startswith("int-"))


def respond(bank, interrupt_id: str, answer: str):
    return invoke("resume", bank, "--session-id", "c", "--respond", f"{interrupt_id}={answer}", "--json")


def test_an_edit_a_rejection_and_always_with_respond(bank):
    question = asked(bank, "send 500 to ann")
    refused = respond(bank, question, '{"decision": "edit", "input": {"to": "ann"}}')
    assert refused.exit_code != 0
    assert "send_money" in refused.stderr
    assert "amount: Field required" in refused.stderr
    assert SENT == []
    edited = respond(bank, question, '{"decision": "edit", "input": {"to": "ann", "amount": 50}}')
    assert edited.exit_code == 0, edited.output
    assert json.loads(edited.stdout)["output"] == "success: sent 50 to ann"

    question = asked(bank, "send 5 to bob")
    rejected = respond(bank, question, '{"decision": "reject", "reason": "bob has left"}')
    assert json.loads(rejected.stdout)["output"] == (
        "error: Error: a human rejected this call of 'send_money': bob has left"
    )

    question = asked(bank, "send 7 to cy")
    assert json.loads(respond(bank, question, "always").stdout)["output"] == "success: sent 7 to cy"
    later = invoke("run", bank, "--input", "send 8 to dee", "--session-id", "c")
    assert later.exit_code == 0, later.output
    assert later.stdout.strip() == "success: sent 8 to dee"
    assert SENT == [("ann", 50), ("cy", 7), ("dee", 8)]
    assert build(parse_file(bank), session_id="c").state.get(ALWAYS_KEY) == ["send_money"]
