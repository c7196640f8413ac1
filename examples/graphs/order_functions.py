"""The steps of the order pipeline that waits for a payment (order_payment.yaml, docs/waiting.md)."""

from __future__ import annotations

from typing import Any

from orchestra.multiagent import NodeInput


def reserve(node_input: NodeInput) -> dict[str, Any]:
    """Reserve the order's stock (idempotent: it runs once, and again only if killed mid-node)."""
    return {"order": node_input.task, "reserved": True}


def ship(node_input: NodeInput) -> str:
    paid = node_input.inputs["payment"]["payload"]
    return f"shipped {node_input.task} (paid {paid['amount']} {paid['currency']})"


def release(node_input: NodeInput) -> str:
    return f"released the stock of {node_input.task}: no payment came in time"
