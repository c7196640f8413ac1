"""The tools, model and config of the approval tests on every door (issue 37 item 3)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestra import ToolContext, tool
from orchestra.server import hash_key
from orchestra.testing import ToolCall
from tests.server.agents import _transfer
from tests.server.conftest import KEYS

SENT: list[tuple[str, int]] = []  # what send_money did, in this process (the in-process servers' tests)


@tool(requires_approval=True)
def send_money(to: str, amount: int) -> str:
    """Send money (a human approves each call).

    Args:
        to: who gets it.
        amount: how much.
    """
    SENT.append((to, amount))
    path = os.environ.get("ORCHESTRA_TEST_SENT")  # a server in another process writes it here
    if path:
        with open(path, "a") as sent:
            sent.write(f"{to} {amount}\n")
    return f"sent {amount} to {to}"


@tool(requires_approval=True, effects=True, context=True, on_unknown="retry")
def approved_transfer(amount: int, tool_context: ToolContext) -> str:
    """Transfer ``amount`` once a human approves it (recorded under its idempotency key; see
    ``tests.server.agents._transfer`` for the kill switch).

    Args:
        amount: what to transfer.
    """
    return _transfer(amount, tool_context)


def banker(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    """``send N to WHO`` calls send_money, ``transfer N`` approved_transfer; a tool's result is answered
    ``<status>: <its text>``; anything else is echoed."""
    prompt_at = max(i for i, m in enumerate(messages) if m["role"] == "user" and "text" in m["content"][0])
    prompt = messages[prompt_at]["content"][0]["text"]
    if prompt_at < len(messages) - 1:
        result = messages[-1]["content"][0]["toolResult"]
        return f"{result['status']}: {result['content'][0]['text']}"
    words = prompt.split()
    if words[0] == "send":
        return ToolCall(
            "send_money", {"to": words[3], "amount": int(words[1])}, tool_use_id=f"call-{prompt_at}"
        )
    if words[0] == "transfer":
        return ToolCall("approved_transfer", {"amount": int(words[1])}, tool_use_id=f"call-{prompt_at}")
    return f"echo: {prompt}"


BANK = """version: 1
kind: agent
id: bank
agents:
  - name: bank
    tools: ['tests.server.approval_agents:send_money', 'tests.server.approval_agents:approved_transfer']
    model: function:tests.server.approval_agents:banker
    conversation_manager: {type: none}
"""


def bank_config(root: Path, extra: str = "") -> Path:
    """A server config hosting ``bank`` in workspace acme, on local files under ``root``."""
    (root / "bank.yaml").write_text(BANK)
    config = root / "bank-server.yaml"
    config.write_text(
        f"""version: 1
storage: file:{root}/store
agents:
  - {{id: bank, spec: bank.yaml, workspace: acme}}
api_keys:
  - {{workspace: acme, sha256: {hash_key(KEYS["acme"])}}}
{extra}"""
    )
    return config


def teller(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    """One turn of four calls of send_money, one after the other (an edit, a rejection, "always", then
    one that no longer asks); then every result, one per line."""
    results = [
        b["toolResult"] for m in messages if m["role"] == "user" for b in m["content"] if "toolResult" in b
    ]
    plan = [("ann", 500), ("bob", 5), ("cy", 7), ("dee", 8)]
    if len(results) < len(plan):
        to, amount = plan[len(results)]
        return ToolCall("send_money", {"to": to, "amount": amount}, tool_use_id=f"call-{to}")
    return "\n".join(f"{r['status']}: {r['content'][0]['text']}" for r in results)


TELLER = """version: 1
kind: graph
id: teller
agents:
  - name: teller
    tools: ['tests.server.approval_agents:send_money']
    model: function:tests.server.approval_agents:teller
nodes:
  - {id: pay, agent: teller}
"""
