"""A support agent's model for the memory tests and the server's: it remembers what it is told to
("remember ..."), recalls for anything else, and answers with what the tool gave back."""

from __future__ import annotations

from typing import Any

from orchestra.testing import ToolCall


def support_reply(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    last = messages[-1]["content"]
    results = [block["toolResult"] for block in last if "toolResult" in block]
    if results:
        content = results[0]["content"][0]
        if "json" in content:
            facts = [item["text"] for item in content["json"]]
            return "You told me: " + "; ".join(facts) if facts else "I have nothing on file for you."
        return "Noted." if results[0]["status"] == "success" else f"Failed: {content.get('text')}"
    text = next(block["text"] for block in last if "text" in block)
    if text.lower().startswith("remember "):
        return ToolCall("remember", {"text": text[len("remember ") :]})
    return ToolCall("recall", {"query": text})
