"""Tool approval on the server's doors (issue 37 item 3): HTTP, AG-UI (decoded with ``ag-ui-protocol``'s
models) and MCP (the official ``mcp`` client). On each: a question that names the tool and its
arguments, an edit, a rejection and "always"; an answer that does not fit is refused."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from ag_ui.core import EventType
from ag_ui.core.types import ResumeEntry

from orchestra.tools.approval import APPROVAL, ApprovalAnswer
from tests.server.approval_agents import SENT, bank_config
from tests.server.conftest import Server, auth
from tests.server.protocols.test_agui import run as agui_run
from tests.server.protocols.test_agui import run_input
from tests.server.protocols.test_mcp_server import Sdk

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def bank(tmp_path):
    SENT.clear()
    with Server(bank_config(tmp_path)) as running:
        yield running


def invoke(server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/api/v1/agents/bank/invoke", json=body, headers=auth(), timeout=60)


def answer(server, session: str, interrupt_id: str, response) -> httpx.Response:
    body = {"session_id": session, "responses": [{"interrupt_id": interrupt_id, "response": response}]}
    return invoke(server, body)


def question_of(answered: httpx.Response) -> dict:
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["status"] == "interrupted", body
    (question,) = body["interrupts"]
    assert (question["name"], question["tool"]) == (APPROVAL, "send_money")
    return question


def test_http_an_edit_a_rejection_and_always(bank):
    asked = question_of(invoke(bank, {"input": "send 500 to ann", "session_id": "h"}))
    assert asked["reason"]["input"] == {"to": "ann", "amount": 500}
    assert asked["reason"]["input_schema"]["properties"]["amount"]["type"] == "integer"
    # An edit that does not fit the tool's schema is refused; nothing ran, the question stays open.
    refused = answer(bank, "h", asked["id"], {"decision": "edit", "input": {"to": "ann", "amount": "lots"}})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "invalid_approval"
    assert "send_money" in refused.json()["error"]["message"]
    assert "amount" in refused.json()["error"]["message"]
    edited = answer(bank, "h", asked["id"], {"decision": "edit", "input": {"to": "ann", "amount": 50}})
    assert edited.status_code == 200, edited.text
    assert (edited.json()["status"], edited.json()["output"]) == ("completed", "success: sent 50 to ann")

    asked = question_of(invoke(bank, {"input": "send 5 to bob", "session_id": "h"}))
    rejected = answer(bank, "h", asked["id"], {"decision": "reject", "reason": "bob has left"})
    assert (
        rejected.json()["output"] == "error: Error: a human rejected this call of 'send_money': bob has left"
    )

    asked = question_of(invoke(bank, {"input": "send 7 to cy", "session_id": "h"}))
    assert answer(bank, "h", asked["id"], "always").json()["output"] == "success: sent 7 to cy"
    later = invoke(bank, {"input": "send 8 to dee", "session_id": "h"})
    assert (later.json()["status"], later.json()["output"]) == ("completed", "success: sent 8 to dee")
    assert SENT == [("ann", 50), ("cy", 7), ("dee", 8)]
    # Another session asks again.
    question_of(invoke(bank, {"input": "send 9 to eve", "session_id": "other"}))


def agui_question(events) -> object:
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED
    assert finished.outcome.type == "interrupt"
    (interrupt,) = finished.outcome.interrupts
    assert interrupt.reason == APPROVAL
    return interrupt


def agui_answer(bank, thread: str, interrupt, payload) -> object:
    entry = ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload=payload)
    return agui_run(bank, "bank", run_input(thread_id=thread, resume=[entry]))


def test_agui_an_edit_a_rejection_and_always(bank):
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    events = agui_run(bank, "bank", run_input("send 500 to ann", thread_id=thread))
    interrupt = agui_question(events)
    calls = [e for e in events if e.type == EventType.TOOL_CALL_START]
    assert interrupt.tool_call_id == calls[0].tool_call_id  # the call it asks about
    assert interrupt.metadata["tool"] == "send_money"
    assert interrupt.metadata["input"] == {"to": "ann", "amount": 500}
    assert interrupt.response_schema == ApprovalAnswer.model_json_schema()
    refused = agui_answer(bank, thread, interrupt, {"decision": "edit", "input": {"amount": 5}})
    assert refused[-1].type == EventType.RUN_ERROR
    assert refused[-1].code == "invalid_approval"
    assert "to: Field required" in refused[-1].message
    edited = agui_answer(bank, thread, interrupt, {"decision": "edit", "input": {"to": "ann", "amount": 50}})
    assert (edited[-1].outcome.type, edited[-1].result) == ("success", "success: sent 50 to ann")

    interrupt = agui_question(agui_run(bank, "bank", run_input("send 5 to bob", thread_id=thread)))
    rejected = agui_answer(bank, thread, interrupt, {"decision": "reject", "reason": "no"})
    assert rejected[-1].result == "error: Error: a human rejected this call of 'send_money': no"

    interrupt = agui_question(agui_run(bank, "bank", run_input("send 7 to cy", thread_id=thread)))
    always = agui_answer(bank, thread, interrupt, {"decision": "always"})
    assert always[-1].result == "success: sent 7 to cy"
    later = agui_run(bank, "bank", run_input("send 8 to dee", thread_id=thread))
    assert (later[-1].outcome.type, later[-1].result) == ("success", "success: sent 8 to dee")
    # The session's state holds what "always" approved (the AG-UI client sees it as state).
    snapshots = [e.snapshot for e in always if e.type == EventType.STATE_SNAPSHOT]
    assert snapshots[-1]["orchestra.always_approved"] == ["send_money"]
    assert SENT == [("ann", 50), ("cy", 7), ("dee", 8)]


async def mcp_question(session, arguments: dict) -> tuple[str, dict]:
    result = await session.call_tool("bank", arguments)
    assert result.is_error is False, result.content
    structured = result.structured_content
    assert structured["status"] == "interrupted"
    (question,) = structured["interrupts"]
    assert (question["name"], question["tool"]) == (APPROVAL, "send_money")
    # The text says what is asked and how to answer it.
    assert "send_money" in result.content[0].text
    assert '"decision": "edit"' in result.content[0].text
    return structured["session_id"], question


async def test_mcp_an_edit_a_rejection_and_always(bank):
    async with Sdk(bank.url) as session:
        sid, question = await mcp_question(session, {"input": "send 500 to ann"})
        assert question["reason"]["input"] == {"to": "ann", "amount": 500}
        bad = {"decision": "edit", "input": {"to": "ann", "amount": 5, "note": "x"}}
        refused = await session.call_tool("bank", {"session_id": sid, "answers": {question["id"]: bad}})
        assert refused.is_error is True
        assert "invalid_approval" in refused.content[0].text
        assert "note" in refused.content[0].text
        good = {"decision": "edit", "input": {"to": "ann", "amount": 50}}
        edited = await session.call_tool("bank", {"session_id": sid, "answers": {question["id"]: good}})
        assert edited.structured_content["output"] == "success: sent 50 to ann"

        _, question = await mcp_question(session, {"input": "send 5 to bob", "session_id": sid})
        no = {"decision": "reject", "reason": "not today"}
        rejected = await session.call_tool("bank", {"session_id": sid, "answers": {question["id"]: no}})
        assert (
            rejected.content[0].text == "error: Error: a human rejected this call of 'send_money': not today"
        )

        _, question = await mcp_question(session, {"input": "send 7 to cy", "session_id": sid})
        always = await session.call_tool("bank", {"session_id": sid, "answers": {question["id"]: "always"}})
        assert always.content[0].text == "success: sent 7 to cy"
        later = await session.call_tool("bank", {"input": "send 8 to dee", "session_id": sid})
        assert json.dumps(later.structured_content["status"]) == '"completed"'
        assert later.content[0].text == "success: sent 8 to dee"
    assert SENT == [("ann", 50), ("cy", 7), ("dee", 8)]


def test_http_a_pipeline_s_agent_node_asks_and_its_answers_are_checked(tmp_path):
    from tests.server.approval_agents import TELLER

    config = bank_config(tmp_path)
    (tmp_path / "teller.yaml").write_text(TELLER)
    text = config.read_text().replace(
        "  - {id: bank,", "  - {id: teller, spec: teller.yaml, workspace: acme}\n  - {id: bank,"
    )
    config.write_text(text)
    SENT.clear()
    with Server(config) as server:

        def post(body: dict) -> httpx.Response:
            url = f"{server.url}/api/v1/agents/teller/invoke"
            return httpx.post(url, json=body, headers=auth(), timeout=60)

        asked = post({"input": "pay", "session_id": "p"}).json()
        assert asked["status"] == "interrupted", asked
        (question,) = asked["interrupts"]
        assert (question["name"], question["node"], question["tool"]) == (APPROVAL, "pay", "send_money")
        answers = [{"interrupt_id": question["id"], "response": {"decision": "edit", "input": {"to": 1}}}]
        refused = post({"session_id": "p", "responses": answers})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "invalid_approval"
        assert "amount: Field required" in refused.json()["error"]["message"]
        answers = [{"interrupt_id": question["id"], "response": {"decision": "reject", "reason": "no"}}]
        going_on = post({"session_id": "p", "responses": answers}).json()
        assert going_on["status"] == "interrupted"  # the next call asks (bob's)
        assert going_on["interrupts"][0]["reason"]["input"] == {"to": "bob", "amount": 5}
    assert SENT == []
