"""One round of an agent's tool calls: the calls run concurrently, through their hooks and the ledger.

Side-effecting tools go through the ledger (see ``orchestra.tools.effects``): marked started and made
durable (``TurnCheckpoint``) before they run, their result made durable before the model sees it, and a
call found started without a result decided by its ``on_unknown``. A tool that requires approval asks
first (see ``orchestra.tools.approval``): its answer, kept in the ledger, decides the call that runs.
"""

from __future__ import annotations

from typing import Any

from orchestra import tracing
from orchestra._concurrency import map_concurrently
from orchestra.agent.structured import TEXT_OUTPUT, InvocationOutput
from orchestra.agent.turn import Checkpoint, PendingTools, TurnAgent
from orchestra.hooks import AfterToolCall, BeforeToolCall, TurnCheckpoint
from orchestra.interrupts import Interrupt, InterruptException
from orchestra.tools import AgentTool, ToolContext, ToolResultDict, TurnControl, tool_result
from orchestra.tools.approval import (
    APPROVAL,
    approval_id,
    check_answer,
    needs_approval,
    remember_always,
    request_for,
)
from orchestra.tools.effects import UNKNOWN_OUTCOME, idempotency_key, unknown_outcome_reason, wants_retry

__all__ = ["run_tool", "run_tools"]


async def run_tools(
    agent: TurnAgent,
    pending: PendingTools,
    invocation_state: dict[str, Any],
    turn: TurnControl,
    output: InvocationOutput,
    checkpoint: Checkpoint,
) -> bool:
    """Run the ledger's waiting calls concurrently, their results into ``pending.completed``; False when
    one of them interrupted (its question is in ``pending.interrupts``)."""
    raised: dict[str, Interrupt] = {}

    async def one(tool_use: dict[str, Any]) -> None:
        tool_use_id = tool_use["toolUseId"]
        effects = bool(getattr(_tool_of(agent, tool_use, output), "effects", False))
        try:
            tool_use, rejected = await _approved(agent, tool_use, pending, invocation_state, output)
            if rejected is not None:  # the model sees why
                pending.completed[tool_use_id] = rejected
                if effects:
                    await agent.hooks.invoke(TurnCheckpoint(agent, invocation_state))
                return
            if effects and tool_use_id in pending.started:
                decided = _unknown_outcome(agent, tool_use, pending)
                if decided is not None:
                    pending.completed[tool_use_id] = decided
                    await agent.hooks.invoke(TurnCheckpoint(agent, invocation_state))
                    return
            elif effects:
                pending.started.add(tool_use_id)
                checkpoint.keep_open_turn(pending)
                await agent.hooks.invoke(TurnCheckpoint(agent, invocation_state))  # before it runs
            pending.completed[tool_use_id] = await run_tool(agent, tool_use, invocation_state, turn, output)
        except InterruptException as signal:
            raised[signal.interrupt.id] = signal.interrupt
            return
        if effects:
            await agent.hooks.invoke(TurnCheckpoint(agent, invocation_state))  # before the model sees it

    waiting = pending.waiting()
    await map_concurrently(one, waiting, limit=len(waiting))
    for interrupt in raised.values():
        pending.interrupts.setdefault(interrupt.id, interrupt)  # one asked before keeps its answer
    return not raised


async def run_tool(
    agent: TurnAgent,
    tool_use: dict[str, Any],
    invocation_state: dict[str, Any],
    turn: TurnControl | None = None,
    output: InvocationOutput = TEXT_OUTPUT,
    key: str | None = None,
) -> ToolResultDict:
    """Run one tool call through the hooks (and its span). Raises ``InterruptException`` if the tool
    interrupts. ``key`` overrides the idempotency key derived from the agent's ``effect_scope``."""
    if not tracing.recording():
        return (await _run_tool(agent, tool_use, invocation_state, turn, output, key))[0]
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_use["name"],
        "gen_ai.tool.call.id": tool_use["toolUseId"],
        "gen_ai.tool.type": "function",  # every tool runs on the agent's side
    }
    with tracing.span(f"execute_tool {tool_use['name']}", attributes) as tool_span:
        tool_span.content("gen_ai.tool.call.arguments", tool_use.get("input"))
        result, exception = await _run_tool(agent, tool_use, invocation_state, turn, output, key)
        tool_span.set(orchestra__tool__status=result.get("status"))
        tool_span.content("gen_ai.tool.call.result", result.get("content"))
        if result.get("status") == "error":
            tool_span.fail(type(exception).__name__ if exception is not None else tracing.OTHER_ERROR)
        return result


async def _run_tool(
    agent: TurnAgent,
    tool_use: dict[str, Any],
    invocation_state: dict[str, Any],
    turn: TurnControl | None,
    output: InvocationOutput,
    key: str | None,
) -> tuple[ToolResultDict, BaseException | None]:
    hooks = agent.hooks
    before = await hooks.invoke(BeforeToolCall(agent, tool_use, invocation_state))
    tool_use_id = tool_use["toolUseId"]
    exception: BaseException | None = None
    if before.cancel is not None:
        result = tool_result(tool_use_id, f"Error: the tool call was cancelled: {before.cancel}", "error")
    else:
        agent_tool = _tool_of(agent, tool_use, output)
        if agent_tool is None:
            available = ", ".join(agent.tool_registry.names) or "none"
            # The model answers the error result and the turn goes on: the log is where it shows.
            agent.log.warning("unknown_tool", tool=tool_use["name"], available=available)
            result = tool_result(
                tool_use_id, f"Error: unknown tool {tool_use['name']!r} (available: {available})", "error"
            )
        else:
            context = ToolContext(
                agent=agent,
                tool_use=tool_use,
                invocation_state=invocation_state,
                idempotency_key=key or idempotency_key(agent.effect_scope, tool_use_id),
                turn=turn,
            )
            try:
                result = await agent_tool.invoke(tool_use, context)
            except InterruptException:
                raise
            except Exception as exc:
                exception = exc
                result = tool_result(tool_use_id, f"Error: {type(exc).__name__}: {exc}", "error")
            # A function tool turns what it raised into an error result itself: hooks see it too.
            exception = exception or context.error
    after = await hooks.invoke(AfterToolCall(agent, tool_use, invocation_state, result, exception))
    return after.result, exception


async def _approved(
    agent: TurnAgent,
    tool_use: dict[str, Any],
    pending: PendingTools,
    invocation_state: dict[str, Any],
    output: InvocationOutput,
) -> tuple[dict[str, Any], ToolResultDict | None]:
    """The call to run (the model's, or the one a human's edit made), and a rejection's error result if a
    human rejected it. Raises ``InterruptException`` to ask when the tool requires approval and the
    question has no answer yet."""
    agent_tool = _tool_of(agent, tool_use, output)
    if not getattr(agent_tool, "requires_approval", False) or agent_tool is None:
        return tool_use, None
    tool_use_id = tool_use["toolUseId"]
    known = pending.interrupts.get(approval_id(tool_use_id))
    if known is None or known.response is None:
        context = ToolContext(
            agent=agent,
            tool_use=tool_use,
            invocation_state=invocation_state,
            idempotency_key=idempotency_key(agent.effect_scope, tool_use_id),
        )
        if not await needs_approval(agent_tool, dict(tool_use.get("input") or {}), context):
            return tool_use, None
        reason = request_for(agent_tool, tool_use).model_dump(mode="json")
        raise InterruptException(Interrupt(id=approval_id(tool_use_id), name=APPROVAL, reason=reason))
    answer = check_answer(agent_tool, tool_use["name"], known.response)  # checked when given, too
    if answer.decision == "reject":
        because = f": {answer.reason}" if answer.reason else ""
        agent.log.info("tool_call_rejected", tool=tool_use["name"], reason=answer.reason)
        message = f"Error: a human rejected this call of {tool_use['name']!r}{because}"
        return tool_use, tool_result(tool_use_id, message, "error")
    if answer.decision == "always":
        remember_always(agent.state, agent_tool.name)
    if answer.decision == "edit":
        return {**tool_use, "input": answer.input}, None
    return tool_use, None


def _tool_of(agent: TurnAgent, tool_use: dict[str, Any], output: InvocationOutput) -> AgentTool | None:
    name = tool_use["name"]
    return output.tool(name) or agent.tool_registry.get(name)


def _unknown_outcome(
    agent: TurnAgent, tool_use: dict[str, Any], pending: PendingTools
) -> ToolResultDict | None:
    """A side-effecting call that started and never returned: its result as its ``on_unknown`` decides,
    or None to run it again (with the same key). Raises ``InterruptException`` to ask a human."""
    tool_use_id = tool_use["toolUseId"]
    policy = getattr(_tool_of(agent, tool_use, TEXT_OUTPUT), "on_unknown", "interrupt")
    key = idempotency_key(agent.effect_scope, tool_use_id)
    reason = unknown_outcome_reason(tool_use, key)
    agent.log.warning("tool_outcome_unknown", tool=tool_use["name"], policy=policy, idempotency_key=key)
    if policy == "retry":
        return None
    if policy == "error":
        return tool_result(
            tool_use_id,
            f"Error: {reason['message']} (idempotency key {key}). Check whether it did before calling it "
            "again.",
            "error",
        )
    interrupt_id = Interrupt.make_id(tool_use_id, UNKNOWN_OUTCOME)
    known = pending.interrupts.get(interrupt_id)
    if known is None or known.response is None:
        raise InterruptException(Interrupt(id=interrupt_id, name=UNKNOWN_OUTCOME, reason=reason))
    if wants_retry(known.response):
        return None
    return tool_result(tool_use_id, known.response)
