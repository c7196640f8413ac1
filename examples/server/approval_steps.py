"""The human approval step of examples/server/approval.yaml (named in the YAML by import path)."""

from __future__ import annotations

from typing import Any

from orchestra.multiagent import NodeInput


def ask_approval(node_input: NodeInput) -> dict[str, Any]:
    """Stop the run until a human answers; the answer is this node's output."""
    draft = str(node_input.inputs.get("draft", ""))
    answer = node_input.interrupt("approval", reason={"draft": draft, "question": "Publish these notes?"})
    return {"approved": answer == "approved", "answer": answer, "draft": draft}


def publish(node_input: NodeInput) -> str:
    decision = node_input.inputs["approve"]
    if not isinstance(decision, dict) or not decision.get("approved"):
        return f"not published (the approver said {decision.get('answer')!r})"
    return f"published: {decision['draft']}"
