"""Tool approval: a tool declared ``@tool(requires_approval=...)`` asks a human before each call runs.

**The question.** Before the call runs, the turn stops with an interrupt named ``tool_approval`` whose
reason is an :class:`ApprovalRequest`: the tool, the call's id, its arguments and the tool's input schema.
``requires_approval`` is ``True`` (every call asks) or a function ``(arguments, tool_context) -> bool``
(the calls it says yes to ask; one that raises asks too, and logs ``approval_check_failed``).

**The answer** (an :class:`ApprovalAnswer`, or a bare word for the first three decisions):

- ``{"decision": "approve"}`` (or ``"approve"``): the call runs as the model asked;
- ``{"decision": "reject", "reason": "..."}`` (or ``"reject"``): the call does not run; the model gets
  an error result that says it was rejected, with the reason;
- ``{"decision": "edit", "input": {...}}``: the call runs with these arguments instead, checked against
  the tool's input schema first (an answer that does not fit is refused, and the question stays open);
- ``{"decision": "always"}`` (or ``"always"``): the call runs, and later calls of the same tool in the same
  session run without asking: the tool's name is kept in the agent's state under ``ALWAYS_KEY``, which
  the session stores.

The answer is kept in the turn's ledger with the question, so a turn resumed after a crash runs the
approved (or edited) call without asking again, and a side-effecting call keeps its idempotency key.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestra._pydantic import validation_problems
from orchestra.errors import OrchestraError
from orchestra.interrupts import Interrupt
from orchestra.tools._tool import AgentTool, ApprovalCheck, ToolContext

__all__ = [
    "ALWAYS_KEY",
    "ANSWER_HINT",
    "APPROVAL",
    "ApprovalAnswer",
    "ApprovalCheck",
    "ApprovalRequest",
    "InvalidApproval",
    "approval_id",
    "check_answer",
    "needs_approval",
    "parse_answer",
]

APPROVAL = "tool_approval"
"""The name of the interrupt a tool that requires approval raises."""

ANSWER_HINT = (
    '"approve", "always", {"decision": "reject", "reason": "..."} or {"decision": "edit", "input": {...}}'
)
"""The answers an approval question takes, in one line (what the doors print)."""

ALWAYS_KEY = "orchestra.always_approved"
"""Where the agent's state keeps the tools approved "always" in its session (a sorted list of names)."""


class InvalidApproval(OrchestraError, ValueError):
    """An answer to a ``tool_approval`` question that cannot be used (its shape, or an edit that does not
    fit the tool's input schema). Nothing runs; the question stays open."""


class ApprovalRequest(BaseModel):
    """What a ``tool_approval`` interrupt asks (its ``reason``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["tool_approval"] = "tool_approval"
    tool: str
    tool_use_id: str
    input: dict[str, Any]
    input_schema: dict[str, Any] = Field(default_factory=dict)
    decisions: list[str] = Field(default_factory=lambda: ["approve", "reject", "edit", "always"])


class ApprovalAnswer(BaseModel):
    """The answer to a ``tool_approval`` question (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject", "edit", "always"]
    reason: str | None = Field(default=None, description="Why it was rejected (the model sees it).")
    input: dict[str, Any] | None = Field(default=None, description="The arguments to run with (edit).")


def approval_id(tool_use_id: str) -> str:
    """The id of the approval question of one tool call (the same after a resume, in any process)."""
    return Interrupt.make_id(tool_use_id, APPROVAL)


def parse_answer(response: Any) -> ApprovalAnswer:
    """``response`` as an :class:`ApprovalAnswer`; raises :class:`InvalidApproval` saying what is wrong."""
    if isinstance(response, str) and response in ("approve", "reject", "always"):
        return ApprovalAnswer(decision=response)
    try:
        answer = ApprovalAnswer.model_validate(response)
    except ValidationError as exc:
        raise InvalidApproval(f"an approval answer is {ANSWER_HINT}: {validation_problems(exc)}") from None
    if answer.decision == "edit" and answer.input is None:
        raise InvalidApproval('an "edit" approval answer needs "input": the arguments to run the tool with')
    if answer.decision != "edit" and answer.input is not None:
        raise InvalidApproval(f'"input" is for an "edit" answer, not {answer.decision!r}')
    return answer


def check_answer(tool: AgentTool | None, tool_name: str, response: Any) -> ApprovalAnswer:
    """``response`` checked as the answer to ``tool_name``'s approval: its shape, and an edit's arguments
    against the tool's input schema (a ``FunctionTool``'s model; other tools check their input when they
    run). Raises :class:`InvalidApproval` naming the tool and what does not fit."""
    try:
        answer = parse_answer(response)
    except InvalidApproval as exc:
        raise InvalidApproval(f"tool {tool_name!r}: {exc}") from None
    model = getattr(tool, "input_model", None)
    if answer.decision == "edit" and model is not None:
        try:
            model.model_validate(answer.input)
        except ValidationError as exc:
            raise InvalidApproval(
                f"tool {tool_name!r}: the edited arguments do not fit its input schema: "
                f"{validation_problems(exc)}"
            ) from None
    return answer


def always_approved(state: Any) -> list[str]:
    """The tools an agent's state says were approved "always" in its session."""
    value = state.get(ALWAYS_KEY)
    return list(value) if isinstance(value, list) else []


def remember_always(state: Any, tool_name: str) -> None:
    """Keep ``tool_name`` as approved "always" in the agent's state (its session stores it)."""
    names = always_approved(state)
    if tool_name not in names:
        state.set(ALWAYS_KEY, sorted([*names, tool_name]))


async def needs_approval(tool: AgentTool | None, arguments: dict[str, Any], context: ToolContext) -> bool:
    """Whether this call of ``tool`` asks first: its ``requires_approval`` (a bool, or a function of the
    arguments and the context, sync or async), unless the session approved the tool "always"."""
    rule = getattr(tool, "requires_approval", False)
    if not rule or tool is None or tool.name in always_approved(context.agent.state):
        return False
    if rule is True:
        return True
    try:
        decided = rule(arguments, context)
        if inspect.isawaitable(decided):
            decided = await decided
    except Exception as exc:  # a check that fails cannot let the call through: a human decides
        context.agent.log.warning(
            "approval_check_failed", tool=tool.name, error=f"{type(exc).__name__}: {exc}"
        )
        return True
    return bool(decided)


def request_for(tool: AgentTool, tool_use: dict[str, Any]) -> ApprovalRequest:
    """The question for one call of ``tool``."""
    return ApprovalRequest(
        tool=tool.name,
        tool_use_id=tool_use["toolUseId"],
        input=dict(tool_use.get("input") or {}),
        input_schema=dict(tool.spec.get("inputSchema", {}).get("json", {})),
    )
