"""Tool approval: a refund tool asks a human before each call; the answers edit, reject and approve it
"always" for the session, and a reloaded session remembers "always".

    python examples/python/tool_approval.py

``issue_refund`` is declared ``@tool(requires_approval=...)`` with a function: refunds over 100 EUR ask
first. The turn stops with an interrupt named ``tool_approval`` whose reason names the tool and its
arguments; the answer is given as the agent's next prompt (here in code; from the command line with
``orchestra resume --respond ID=<answer>``, over HTTP as ``responses``, in the dashboard's approval
card, over AG-UI as a ``resume`` entry, over MCP as ``answers``). See docs/approval.md.
"""

from __future__ import annotations

import tempfile
from typing import Any

from orchestra import Agent, ToolContext, tool
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage
from orchestra.testing import FunctionModel, ToolCall

REFUNDS: list[str] = []


def over_100(arguments: dict[str, Any], tool_context: ToolContext) -> bool:
    return arguments["amount"] > 100


@tool(requires_approval=over_100, effects=True, context=True)
def issue_refund(order: str, amount: int, tool_context: ToolContext) -> str:
    """Refund an order (a side effect: it runs once, with its idempotency key).

    Args:
        order: the order's id.
        amount: how much to refund, in EUR.
    """
    REFUNDS.append(f"{order}: {amount} EUR")
    return f"refunded {amount} EUR on {order}"


def support_model(messages: list[dict[str, Any]], tool_specs: Any) -> Any:
    """A stand-in for a real model: ``refund ORDER AMOUNT`` calls the tool; its result is reported."""
    prompt_at = max(i for i, m in enumerate(messages) if m["role"] == "user" and "text" in m["content"][0])
    if prompt_at < len(messages) - 1:
        return messages[-1]["content"][0]["toolResult"]["content"][0]["text"]
    _, order, amount = messages[prompt_at]["content"][0]["text"].split()
    return ToolCall("issue_refund", {"order": order, "amount": int(amount)}, tool_use_id=f"call-{prompt_at}")


def agent(root: str) -> Agent:
    return Agent(
        model=FunctionModel(support_model),
        tools=[issue_refund],
        session_manager=SnapshotSessionManager("customer-42", storage=LocalFileStorage(root)),
    )


def ask(bot: Agent, prompt: Any) -> Any:
    result = bot(prompt)
    if result.stop_reason == "interrupt":
        (question,) = result.interrupts
        print(f"asked: {question.reason['tool']} {question.reason['input']}")
        return question
    print(f"agent: {result}")
    return None


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="orchestra-approval-") as root:
        bot = agent(root)
        ask(bot, "refund A-1 40")  # under 100 EUR: no question
        question = ask(bot, "refund A-2 900")
        edit = {"decision": "edit", "input": {"order": "A-2", "amount": 90}}
        ask(bot, [question.to_response(edit)])
        question = ask(bot, "refund A-3 500")
        reject = {"decision": "reject", "reason": "A-3 was already refunded"}
        ask(bot, [question.to_response(reject)])
        question = ask(bot, "refund A-4 150")
        ask(bot, [question.to_response("always")])
        ask(agent(root), "refund A-5 300")  # a new process on the same session: no question
    print(f"refunds: {REFUNDS}")


if __name__ == "__main__":
    main()
