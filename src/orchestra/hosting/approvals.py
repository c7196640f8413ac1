"""Answers to tools' approval questions, checked before a hosted run starts (see
``orchestra.tools.approval``): an answer of the wrong shape, or an edit whose arguments do not fit the
tool's input schema, is refused 422 ``invalid_approval`` with nothing run and the question still open."""

from __future__ import annotations

from typing import Any

from orchestra.agent import Agent
from orchestra.hosting.interrupts import ResponsesRefused, open_interrupts
from orchestra.multiagent import MultiAgentBase
from orchestra.tools import AgentTool
from orchestra.tools.approval import (
    ANSWER_HINT,
    APPROVAL,
    ApprovalAnswer,
    InvalidApproval,
    check_answer,
    parse_answer,
)

# What the doors use of tools' approval (the server reaches tools only through hosting).
__all__ = ["ANSWER_HINT", "APPROVAL", "ApprovalAnswer", "check_approval_answers", "parse_answer"]


def _tool(target: Agent | MultiAgentBase, question: dict[str, Any]) -> AgentTool | None:
    """The tool that asked ``question`` (an agent's, or a pipeline's agent node's)."""
    name = question.get("tool")
    if isinstance(target, Agent):
        return target.tool_registry.get(name) if name else None
    node = target.nodes.get(question.get("node") or "")
    if node is None or node.kind != "agent" or not name:
        return None
    found: AgentTool | None = node.agent.tool_registry.get(name)
    return found


def check_approval_answers(target: Agent | MultiAgentBase, responses: dict[str, Any]) -> None:
    """Refuse an answer to an approval question of ``target`` that cannot be used (see the docstring)."""
    for question in open_interrupts(target):
        if question["name"] != APPROVAL or question["id"] not in responses:
            continue
        name = question.get("tool") or (question.get("reason") or {}).get("tool") or "?"
        try:
            check_answer(_tool(target, question), name, responses[question["id"]])
        except InvalidApproval as exc:
            raise ResponsesRefused(422, "invalid_approval", str(exc)) from None
