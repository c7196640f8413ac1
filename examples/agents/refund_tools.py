"""The refund tool and the stand-in model of refunds.yaml (a tool that asks before large refunds)."""

from __future__ import annotations

from typing import Any

from orchestra import tool
from orchestra.testing import ToolCall


@tool(requires_approval=lambda arguments, context: arguments["amount"] > 100, effects=True)
def issue_refund(order: str, amount: int) -> str:
    """Refund an order; refunds over 100 EUR wait for a human's approval.

    Args:
        order: the order's id.
        amount: how much to refund, in EUR.
    """
    return f"refunded {amount} EUR on {order}"


def support_model(messages: list[dict[str, Any]], tool_specs: Any) -> Any:
    """A stand-in for a real model: ``refund ORDER AMOUNT`` calls the tool; its result is reported."""
    prompt_at = max(i for i, m in enumerate(messages) if m["role"] == "user" and "text" in m["content"][0])
    if prompt_at < len(messages) - 1:
        return messages[-1]["content"][0]["toolResult"]["content"][0]["text"]
    _, order, amount = messages[prompt_at]["content"][0]["text"].split()
    return ToolCall("issue_refund", {"order": order, "amount": int(amount)}, tool_use_id=f"call-{prompt_at}")
