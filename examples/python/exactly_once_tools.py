"""Side-effecting tools that run once: press Ctrl-C half way, run it again, and no invoice goes out twice.

    python examples/python/exactly_once_tools.py          # Ctrl-C while it sends
    python examples/python/exactly_once_tools.py          # resumes the turn: the rest is sent, once

``send_invoice`` is declared ``@tool(effects=True)``: before it runs, the call is recorded in the turn's
ledger and saved; its result is saved before the model sees it. The "invoicing service" here is a file,
``outbox.jsonl``, that like a real API keeps one entry per Idempotency-Key. A run cut by Ctrl-C leaves the
turn open in the session (./.orchestra-example/); the next run resumes it: sent invoices are not sent
again, a send cut half way is repeated with the same key (``on_unknown="retry"``), and the rest go out.
Delete ./.orchestra-example/ to start over.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

from orchestra import Agent, ToolContext, tool
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage
from orchestra.testing import ScriptedModel, ToolCall

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else ".orchestra-example")
OUTBOX = ROOT / "outbox.jsonl"


def already_sent(key: str) -> bool:
    return OUTBOX.exists() and any(json.loads(line)["key"] == key for line in OUTBOX.read_text().splitlines())


@tool(effects=True, context=True, on_unknown="retry")
async def send_invoice(customer: str, amount: int, tool_context: ToolContext) -> str:
    """Send an invoice (an external effect: the service keeps one per Idempotency-Key)."""
    key = tool_context.idempotency_key
    await anyio.sleep(1.0)  # the network: time to press Ctrl-C
    if not already_sent(key):
        with OUTBOX.open("a") as outbox:
            outbox.write(json.dumps({"key": key, "customer": customer, "amount": amount}) + "\n")
    print(f"  sent the invoice for {customer} ({amount} EUR)", flush=True)
    return f"invoice for {customer} sent"


def build() -> Agent:
    ROOT.mkdir(exist_ok=True)
    model = ScriptedModel(
        [
            [ToolCall("send_invoice", {"customer": "acme", "amount": 120}, tool_use_id="inv-1")],
            [
                ToolCall("send_invoice", {"customer": "globex", "amount": 80}, tool_use_id="inv-2"),
                ToolCall("send_invoice", {"customer": "initech", "amount": 45}, tool_use_id="inv-3"),
            ],
            "All three invoices are out.",
        ],
        follow_history=True,  # a new process continues the script where the conversation is, as a model would
    )
    return Agent(
        model=model,
        tools=[send_invoice],
        session_manager=SnapshotSessionManager("billing", storage=LocalFileStorage(ROOT / "sessions")),
    )


def main() -> None:
    agent = build()
    if agent.messages and agent.open_turn() is None:
        print("the turn is already done; delete", ROOT, "to start over")
    else:
        if agent.open_turn() is not None:
            print("resuming the turn a stopped run left open")
        try:
            result = agent("Send this month's invoices.")
        except KeyboardInterrupt:
            print("stopped half way: run me again to resume the turn")
            return
        print(result, "(resumed)" if result.resumed else "")
    sent = [json.loads(line) for line in OUTBOX.read_text().splitlines()] if OUTBOX.exists() else []
    print("outbox:", ", ".join(f"{s['customer']} {s['amount']}" for s in sent))


if __name__ == "__main__":
    main()
