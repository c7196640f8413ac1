"""Tool approval (issue 37 item 3): ``@tool(requires_approval=...)`` asks before the call runs; the
answer approves, rejects with a reason the model sees, edits the arguments (checked against the tool's
schema), or approves the tool for the rest of the session, which a reloaded session remembers."""

from __future__ import annotations

from typing import Any

import pytest

from orchestra import Agent, ToolContext, tool
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel, ToolCall
from orchestra.tools.approval import ALWAYS_KEY, APPROVAL, ApprovalRequest, InvalidApproval

SENT: list[tuple[str, int, str]] = []


@tool(requires_approval=True, context=True)
def send_money(to: str, amount: int, tool_context: ToolContext) -> str:
    """Send money.

    Args:
        to: who gets it.
        amount: how much.
    """
    SENT.append((to, amount, tool_context.idempotency_key))
    return f"sent {amount} to {to}"


@tool(requires_approval=lambda arguments, context: arguments["amount"] > 100)
def pay(amount: int) -> str:
    """Pay ``amount``; only large amounts ask first."""
    return f"paid {amount}"


def planner(messages: list[dict[str, Any]], specs: Any) -> Any:
    """``send N to WHO`` / ``pay N``: one tool call; a tool result is answered with its text."""
    prompt_at = max(i for i, m in enumerate(messages) if m["role"] == "user" and "text" in m["content"][0])
    if prompt_at < len(messages) - 1:
        result = messages[-1]["content"][0]["toolResult"]
        return f"{result['status']}: {result['content'][0]['text']}"
    words = messages[prompt_at]["content"][0]["text"].split()
    if words[0] == "pay":
        return ToolCall("pay", {"amount": int(words[1])}, tool_use_id=f"call-{prompt_at}")
    return ToolCall("send_money", {"to": words[3], "amount": int(words[1])}, tool_use_id=f"call-{prompt_at}")


def agent(storage: InMemoryStorage | None = None, session: str = "s") -> Agent:
    manager = SnapshotSessionManager(session, storage=storage) if storage is not None else None
    return Agent(model=FunctionModel(planner), tools=[send_money, pay], session_manager=manager)


@pytest.fixture(autouse=True)
def _clear() -> None:
    SENT.clear()


def asked(result: Any) -> Any:
    assert result.stop_reason == "interrupt"
    (question,) = result.interrupts
    assert question.name == APPROVAL
    return question


def test_the_question_names_the_tool_and_its_arguments_and_nothing_runs_before_the_answer():
    bot = agent()
    question = asked(bot("send 5 to ann"))
    request = ApprovalRequest.model_validate(question.reason)
    assert (request.tool, request.input, request.tool_use_id) == (
        "send_money",
        {"to": "ann", "amount": 5},
        "call-0",
    )
    assert request.input_schema["required"] == ["to", "amount"]
    assert SENT == []
    result = bot([question.to_response("approve")])
    assert str(result) == "success: sent 5 to ann"
    assert [s[:2] for s in SENT] == [("ann", 5)]


def test_a_rejection_runs_nothing_and_the_model_sees_the_reason_as_an_error_result():
    bot = agent()
    question = asked(bot("send 5 to ann"))
    result = bot([question.to_response({"decision": "reject", "reason": "ann was paid yesterday"})])
    assert SENT == []
    assert str(result) == "error: Error: a human rejected this call of 'send_money': ann was paid yesterday"


def test_an_edit_runs_the_edited_call_with_the_same_idempotency_key():
    bot = agent()
    question = asked(bot("send 500 to ann"))
    result = bot([question.to_response({"decision": "edit", "input": {"to": "ann", "amount": 50}})])
    assert str(result) == "success: sent 50 to ann"
    assert [s[:2] for s in SENT] == [("ann", 50)]
    # The model's call stays as it asked in the history; the result says what ran.
    assert bot.messages[1]["content"][0]["toolUse"]["input"] == {"to": "ann", "amount": 500}


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ({"decision": "edit", "input": {"to": "ann", "amount": "lots"}}, "do not fit its input schema"),
        ({"decision": "edit", "input": {"to": "ann", "amount": 5, "cc": "bob"}}, "cc"),
        ({"decision": "edit"}, 'needs "input"'),
        ({"decision": "maybe"}, "decision"),
        ("yes", "an approval answer is"),
    ],
)
def test_an_answer_that_does_not_fit_is_refused_and_the_question_stays_open(answer, words):
    bot = agent()
    question = asked(bot("send 5 to ann"))
    with pytest.raises(InvalidApproval, match="send_money") as refused:
        bot([question.to_response(answer)])
    assert words in str(refused.value)
    assert SENT == []
    assert [i.id for i in bot.open_interrupts()] == [question.id]  # still open: answer it properly
    assert str(bot([question.to_response("approve")])) == "success: sent 5 to ann"


def test_always_is_remembered_in_the_session_and_survives_a_reload():
    storage = InMemoryStorage()
    bot = agent(storage)
    question = asked(bot("send 1 to ann"))
    assert str(bot([question.to_response("always")])) == "success: sent 1 to ann"
    assert bot.state.get(ALWAYS_KEY) == ["send_money"]
    assert str(bot("send 2 to bob")) == "success: sent 2 to bob"  # no question
    reloaded = agent(storage)  # a new process, the same session
    assert str(reloaded("send 3 to cy")) == "success: sent 3 to cy"
    assert [s[:2] for s in SENT] == [("ann", 1), ("bob", 2), ("cy", 3)]
    # Another session asks again.
    other = agent(storage, session="t")
    asked(other("send 4 to dee"))


def test_an_answer_survives_a_reload_before_the_call_runs():
    storage = InMemoryStorage()
    question = asked(agent(storage)("send 5 to ann"))
    answered = agent(storage)(
        [question.to_response({"decision": "edit", "input": {"to": "bo", "amount": 6}})]
    )
    assert str(answered) == "success: sent 6 to bo"


def test_a_function_decides_which_calls_ask():
    bot = agent()
    assert str(bot("pay 20")) == "success: paid 20"
    question = asked(bot("pay 200"))
    assert question.reason["input"] == {"amount": 200}
    assert str(bot([question.to_response("approve")])) == "success: paid 200"


def test_requires_approval_must_be_a_bool_or_a_function():
    from orchestra.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="requires_approval"):
        tool(name="x", requires_approval="yes")(lambda: None)  # type: ignore[arg-type]


def test_a_check_that_raises_asks_rather_than_letting_the_call_through():
    def broken(arguments: dict[str, Any], context: ToolContext) -> bool:
        raise KeyError("limit")

    @tool(requires_approval=broken)
    def pay_out(amount: int) -> str:
        """Pay out ``amount``."""
        return f"paid out {amount}"

    def calls(messages: list[dict[str, Any]], specs: Any) -> Any:
        if "toolResult" in messages[-1]["content"][0]:
            return messages[-1]["content"][0]["toolResult"]["content"][0]["text"]
        return ToolCall("pay_out", {"amount": 3}, tool_use_id="c1")

    bot = Agent(model=FunctionModel(calls), tools=[pay_out])
    question = asked(bot("pay out"))
    assert question.reason["tool"] == "pay_out"
    assert str(bot([question.to_response("approve")])) == "paid out 3"
