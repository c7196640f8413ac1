"""The agent loop: model -> tools (concurrently) -> model, until the model ends its turn."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from typing import TYPE_CHECKING, Any, cast

from orchestra import tracing
from orchestra._concurrency import map_concurrently
from orchestra.agent.result import (
    AgentMetrics,
    AgentResult,
    AgentStreamEvent,
    MessageEvent,
    ResultEvent,
    TextChunkEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from orchestra.agent.structured import OutputTool, supports_tool_choice
from orchestra.conversation.null import NullConversationManager
from orchestra.errors import AgentError, ContextWindowOverflowError, MaxCyclesError
from orchestra.history import EMPTY_REPLY, is_blank_text
from orchestra.hooks import (
    AfterInvocation,
    AfterModelCall,
    AfterToolCall,
    BeforeInvocation,
    BeforeModelCall,
    BeforeToolCall,
    TurnCheckpoint,
)
from orchestra.interrupts import Interrupt, InterruptException, interrupt_responses, is_interrupt_responses
from orchestra.messages import MessageDict, Usage, validate_message
from orchestra.models import StreamStop, TextDelta, ToolUseEvent, UsageEvent
from orchestra.tools import ToolContext, ToolResultDict, TurnControl, tool_result
from orchestra.tools.effects import UNKNOWN_OUTCOME, idempotency_key, unknown_outcome_reason, wants_retry

if TYPE_CHECKING:
    from orchestra.agent.agent import Agent

__all__ = ["Checkpoint", "PendingTools", "prompt_messages", "run_invocation", "run_tool"]


class PendingTools:
    """A turn's tool calls while they run (its ledger), and after an interrupt stopped them: persisted with
    the agent's state as ``interrupt_state``, so that a resumed turn runs only what is left.

    Attributes:
        tool_uses: the model's tool calls, in order.
        completed: the results so far, by tool-use id.
        interrupts: the questions raised, by interrupt id (with their responses once given).
        started: the side-effecting calls that began (``@tool(effects=True)``); one with no result has an
            unknown outcome (see ``orchestra.tools.effects``).
        queued: a prompt that came while this turn was open (after a killed process) and waits for it:
            it runs once the turn is finished, in the invocation that answers the interrupts.
    """

    def __init__(
        self,
        tool_uses: list[dict[str, Any]],
        completed: dict[str, ToolResultDict],
        interrupts: dict[str, Interrupt],
        started: set[str] | None = None,
        queued: list[MessageDict] | None = None,
    ) -> None:
        self.tool_uses = tool_uses
        self.completed = completed
        self.interrupts = interrupts
        self.started = started if started is not None else set()
        self.queued = queued if queued is not None else []

    def to_dict(self) -> dict[str, Any]:
        out = {
            "tool_uses": self.tool_uses,
            "completed": self.completed,
            "interrupts": {k: v.model_dump(mode="json") for k, v in self.interrupts.items()},
        }
        if self.started:
            out["started"] = sorted(self.started)
        if self.queued:
            out["queued"] = self.queued
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingTools:
        return cls(
            list(data["tool_uses"]),
            dict(data["completed"]),
            {k: Interrupt.model_validate(v) for k, v in data["interrupts"].items()},
            set(data.get("started", ())),
            list(data.get("queued", ())),
        )

    def copy(self) -> PendingTools:
        """An independent copy (the loop changes ``completed`` and the interrupts' responses in place)."""
        return PendingTools.from_dict(self.to_dict())

    def open_interrupts(self) -> list[Interrupt]:
        return [i for i in self.interrupts.values() if i.response is None]


class Checkpoint:
    """What an invocation started from, so that a turn that does not finish leaves no trace.

    Every way an invocation can fail (a model error, ``MaxCyclesError``, a cancellation or timeout, an
    abandoned stream) rolls the history back to this point: the history then holds only whole turns,
    which every provider accepts (see ``orchestra.history``). Taking it costs O(1); a full copy of the
    history is made only if the conversation manager is about to reshape it (a context overflow).
    """

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self._length = len(agent.messages)
        self._pending = agent._pending_tools.copy() if agent._pending_tools else None
        self._messages: list[MessageDict] | None = None
        self._manager_state: dict[str, Any] | None = None
        self._dropped = 0  # how many dropped messages there were at a reshape
        self._closed = False
        self.kept_open = False

    def before_reshape(self) -> None:
        """Called before the conversation manager rewrites earlier messages."""
        if self._messages is None:
            agent = self._agent
            self._messages = agent.messages[: self._length]
            self._manager_state = agent.conversation_manager.get_state()
            self._dropped = len(agent.dropped_messages) if agent.dropped_messages is not None else 0

    def close(self) -> None:
        """The invocation finished: nothing to roll back any more."""
        self._closed = True

    def keep_open_turn(self, pending: PendingTools) -> None:
        """A side-effecting tool is about to run: from now on a failure does not roll the turn back, it
        leaves it open (the history up to the model's tool calls, and ``pending``, the live ledger) for the
        next invocation to resume, so the effect is never lost nor run twice."""
        agent = self._agent
        self._length = len(agent.messages)
        self._pending = pending
        self._messages = self._manager_state = None
        self.kept_open = True

    def roll_back(self) -> bool:
        """Put the history and the interrupt state back as they were (once); whether anything was done."""
        if self._closed:
            return False
        self._closed = True
        agent = self._agent
        if self._messages is not None:
            agent.messages[:] = self._messages
            if self._manager_state is not None:
                agent.conversation_manager.restore_state(self._manager_state)
            if agent.dropped_messages is not None:
                del agent.dropped_messages[self._dropped :]  # they are back in the history
        else:
            del agent.messages[self._length :]
        agent._pending_tools = self._pending
        return True


def prompt_messages(prompt: Any) -> list[MessageDict]:
    """The messages a prompt adds: a string, a list of content blocks, or a list of messages."""
    messages = _prompt_messages(prompt)
    for message in messages:
        if any(is_blank_text(block) for block in message["content"]) or not message["content"]:
            raise ValueError(
                "a prompt must not be blank (no provider accepts an empty text block); pass None to "
                "continue from the current history"
            )
    return messages


def _prompt_messages(prompt: Any) -> list[MessageDict]:
    if prompt is None:
        return []
    if isinstance(prompt, str):
        return [{"role": "user", "content": [{"text": prompt}]}]
    if isinstance(prompt, dict) and "role" in prompt:
        return [validate_message(prompt)]
    if isinstance(prompt, Sequence) and prompt:
        if all(isinstance(item, dict) and "role" in item for item in prompt):
            return [validate_message(item) for item in prompt]
        return [validate_message({"role": "user", "content": list(prompt)})]
    raise ValueError(
        "a prompt is a string, a list of content blocks, a list of messages or None; "
        f"got {type(prompt).__name__}"
    )


async def run_tool(
    agent: Agent,
    tool_use: dict[str, Any],
    invocation_state: dict[str, Any],
    interrupts: dict[str, Interrupt] | None = None,
    turn: TurnControl | None = None,
    output: OutputTool | None = None,
    idempotency_key: str | None = None,
) -> ToolResultDict:
    """Run one tool call through the hooks. Raises ``InterruptException`` if the tool interrupts.

    ``idempotency_key`` overrides the key derived from the agent's ``effect_scope`` and the call's id."""
    if not tracing.recording():
        return (
            await _run_tool(agent, tool_use, invocation_state, interrupts, turn, output, idempotency_key)
        )[0]
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_use["name"],
        "gen_ai.tool.call.id": tool_use["toolUseId"],
        "gen_ai.tool.type": "function",  # every tool runs on the agent's side
    }
    with tracing.span(f"execute_tool {tool_use['name']}", attributes) as tool_span:
        tool_span.content("gen_ai.tool.call.arguments", tool_use.get("input"))
        result, exception = await _run_tool(
            agent, tool_use, invocation_state, interrupts, turn, output, idempotency_key
        )
        tool_span.set(orchestra__tool__status=result.get("status"))
        tool_span.content("gen_ai.tool.call.result", result.get("content"))
        if result.get("status") == "error":
            tool_span.fail(type(exception).__name__ if exception is not None else tracing.OTHER_ERROR)
        return result


async def _run_tool(
    agent: Agent,
    tool_use: dict[str, Any],
    invocation_state: dict[str, Any],
    interrupts: dict[str, Interrupt] | None,
    turn: TurnControl | None,
    output: OutputTool | None,
    key: str | None = None,
) -> tuple[ToolResultDict, BaseException | None]:
    hooks = agent.hooks
    before = await hooks.invoke(BeforeToolCall(agent, tool_use, invocation_state))
    tool_use_id = tool_use["toolUseId"]
    exception: BaseException | None = None
    caught: BaseException | None = None
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
                _interrupts=interrupts or {},
                _turn=turn,
            )
            try:
                result = await agent_tool.invoke(tool_use, context)
            except InterruptException:
                raise
            except Exception as exc:
                exception = exc
                result = tool_result(tool_use_id, f"Error: {type(exc).__name__}: {exc}", "error")
            caught = context._error
    # A function tool turns what it raised into an error result itself (``caught``): hooks see it too.
    exception = exception or caught
    after = await hooks.invoke(AfterToolCall(agent, tool_use, invocation_state, result, exception))
    return after.result, exception


async def _run_tools(
    agent: Agent,
    pending: PendingTools,
    invocation_state: dict[str, Any],
    turn: TurnControl,
    output: OutputTool | None,
    checkpoint: Checkpoint,
) -> list[ToolResultDict] | None:
    """Run the pending tool calls concurrently; None when one of them interrupted (pending is updated).

    Side-effecting tools go through the ledger (see ``orchestra.tools.effects``): marked started and made
    durable before they run, their result made durable before the model sees it, and a call found
    started without a result decided by its ``on_unknown``."""
    raised: dict[str, Interrupt] = {}

    async def one(tool_use: dict[str, Any]) -> None:
        tool_use_id = tool_use["toolUseId"]
        effects = bool(getattr(_tool_of(agent, tool_use, output), "effects", False))
        try:
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
            pending.completed[tool_use_id] = await run_tool(
                agent, tool_use, invocation_state, pending.interrupts, turn, output
            )
        except InterruptException as signal:
            raised[signal.interrupt.id] = signal.interrupt
            return
        if effects:
            await agent.hooks.invoke(TurnCheckpoint(agent, invocation_state))  # before the model sees it

    waiting = [t for t in pending.tool_uses if t["toolUseId"] not in pending.completed]
    await map_concurrently(one, waiting, limit=len(waiting))
    if raised:
        for interrupt in raised.values():
            known = pending.interrupts.get(interrupt.id)
            pending.interrupts[interrupt.id] = interrupt if known is None else known
        return None
    return [pending.completed[t["toolUseId"]] for t in pending.tool_uses]


def _turn_closed(messages: list[MessageDict]) -> bool:
    """Whether the history ends with the assistant's reply that calls no tool (a finished turn)."""
    last = messages[-1] if messages else None
    return (
        last is not None
        and last["role"] == "assistant"
        and not any("toolUse" in block for block in last["content"])
    )


def _tool_of(agent: Agent, tool_use: dict[str, Any], output: OutputTool | None) -> Any:
    if output is not None and tool_use["name"] == output.name:
        return output
    return agent.tool_registry.get(tool_use["name"])


def _unknown_outcome(agent: Agent, tool_use: dict[str, Any], pending: PendingTools) -> ToolResultDict | None:
    """A side-effecting call that started and never returned: its result as its ``on_unknown`` decides,
    or None to run it again (with the same key). Raises ``InterruptException`` to ask a human."""
    tool_use_id = tool_use["toolUseId"]
    policy = getattr(_tool_of(agent, tool_use, None), "on_unknown", "interrupt")
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


async def run_invocation(
    agent: Agent,
    prompt: Any,
    invocation_state: dict[str, Any],
    checkpoint: Checkpoint,
    output: OutputTool | None = None,
) -> AsyncGenerator[AgentStreamEvent, None]:
    """One invocation of ``agent``: the body of ``Agent.stream_async``.

    With ``output`` (structured output, see ``orchestra.agent.structured``) the model also sees the output
    tool, and the invocation ends only when it was called with valid input (or raises past its retries).

    If it does not finish (an exception, a cancellation, the caller closing the stream), ``checkpoint``
    rolls the history back to where it started; ``AfterInvocation`` then sees the rolled-back history
    (hooks run for exceptions, not for cancellations, where nothing may be awaited).
    """
    telemetry = tracing.model_telemetry(agent.model) if tracing.recording() else None
    attributes: dict[str, Any] = {}
    if telemetry is not None:
        attributes = {
            **tracing.chat_attributes(telemetry, "invoke_agent"),
            "gen_ai.agent.name": agent.name,
            "gen_ai.agent.id": agent.agent_id,
            "gen_ai.conversation.id": getattr(agent.session_manager, "session_id", None),
        }
    with tracing.span(f"invoke_agent {agent.name}", attributes) as agent_span:
        started = time.perf_counter()
        metrics = AgentMetrics()
        hooks = agent.hooks
        await hooks.invoke(BeforeInvocation(agent, invocation_state))
        try:
            pending = agent._pending_tools
            queued: list[MessageDict] = []  # a new prompt, once the open turn it found is finished
            resumed = False
            open_turn = agent.open_turn() if not is_interrupt_responses(prompt) else None
            if is_interrupt_responses(prompt):
                if pending is None:
                    raise AgentError(f"agent {agent.name!r} got interrupt responses but is not interrupted")
                for interrupt_id, response in interrupt_responses(prompt).items():
                    if interrupt_id not in pending.interrupts:
                        raise AgentError(f"agent {agent.name!r} has no open interrupt {interrupt_id!r}")
                    pending.interrupts[interrupt_id].response = response
                queued, resumed = list(pending.queued), bool(pending.queued)  # it runs after the turn
            elif open_turn is not None:
                # A turn left open (a killed process, or a failure after a side effect): it is finished
                # first. The same prompt again is the caller's retry of it; another runs after it.
                resumed = True
                new = prompt_messages(prompt)
                if new and new != agent.messages[open_turn : open_turn + len(new)]:
                    queued = new
                agent.log.info("turn_resumed", open_messages=len(agent.messages) - open_turn)
            else:
                if pending is not None:
                    open_ids = ", ".join(i.id for i in pending.open_interrupts())
                    raise AgentError(
                        f"agent {agent.name!r} is interrupted and waits for responses to {open_ids}; invoke "
                        "it with [{'interruptResponse': {'interruptId': ..., 'response': ...}}]"
                    )
                for prompt_message in prompt_messages(prompt):
                    await agent._append_message(prompt_message, invocation_state)
                    yield MessageEvent(prompt_message)

            message: MessageDict = (
                agent.messages[-1] if agent.messages else {"role": "assistant", "content": []}
            )
            stop_reason = "end_turn"
            force_output = False
            retrying = False  # a failed model call is made again (a hook said so): not a new cycle
            while True:
                if pending is None and queued and _turn_closed(agent.messages):
                    # The open turn is finished (the model answered it): now the prompt that came with
                    # this invocation. Not before: after the open turn's tool results the model is asked.
                    for prompt_message in queued:
                        await agent._append_message(prompt_message, invocation_state)
                        yield MessageEvent(prompt_message)
                    queued = []
                if pending is None:
                    metrics.cycles += 0 if retrying else 1
                    if metrics.cycles > agent.max_cycles:
                        raise MaxCyclesError(
                            f"agent {agent.name!r}: the model kept calling tools for {agent.max_cycles} cycles "
                            "without ending its turn; raise Agent(max_cycles=...) or check the tools' results"
                        )
                    await hooks.invoke(BeforeModelCall(agent, invocation_state))
                    text: list[str] = []
                    tool_uses: list[dict[str, Any]] = []
                    usage = Usage()
                    chat = (
                        tracing.span(
                            f"chat {telemetry.request_model}",
                            tracing.chat_attributes(telemetry),
                            "client" if telemetry.remote else "internal",
                        )
                        if telemetry is not None
                        else tracing.span("chat")
                    )
                    with chat as chat_span:
                        chat_span.content("gen_ai.input.messages", tracing.genai_messages, agent.messages)
                        chat_span.content(
                            "gen_ai.system_instructions",
                            tracing.system_instructions,
                            agent.system_prompt,
                        )
                        try:
                            model_stream = _stream_model(agent, checkpoint, output, force_output)
                            async with aclosing(model_stream) as model_events:
                                async for event in model_events:
                                    if isinstance(event, TextDelta):
                                        text.append(event.text)
                                        yield TextChunkEvent(event.text)
                                    elif isinstance(event, ToolUseEvent):
                                        tool_use = {
                                            "toolUseId": event.tool_use_id,
                                            "name": event.name,
                                            "input": event.input,
                                        }
                                        tool_uses.append(tool_use)
                                        yield ToolCallEvent(tool_use)
                                    elif isinstance(event, UsageEvent):
                                        usage = event.usage
                                    elif isinstance(event, StreamStop):
                                        stop_reason = event.reason
                        except Exception as exc:
                            failed = await hooks.invoke(
                                AfterModelCall(agent, invocation_state, exception=exc)
                            )
                            if not failed.retry:
                                raise
                            chat_span.fail(type(exc).__name__)
                            retrying = True
                            continue
                        retrying = False
                        chat_span.usage(usage)
                        reply = "".join(text)
                        content: list[dict[str, Any]] = [{"text": reply}] if reply.strip() else []
                        content.extend({"toolUse": t} for t in tool_uses)
                        message = {"role": "assistant", "content": content}
                        chat_span.set(gen_ai__response__finish_reasons=[tracing.finish_reason(stop_reason)])
                        chat_span.content(
                            "gen_ai.output.messages", tracing.output_messages, message, stop_reason
                        )
                    metrics.usage = metrics.usage + usage
                    await hooks.invoke(
                        AfterModelCall(agent, invocation_state, message, stop_reason, usage=usage)
                    )
                    # No provider accepts an empty assistant message: an empty reply is stored as a marker,
                    # while the result keeps what the model said (nothing).
                    stored = message if content else {"role": "assistant", "content": [{"text": EMPTY_REPLY}]}
                    await agent._append_message(stored, invocation_state)
                    yield MessageEvent(stored)
                    if not tool_uses:
                        if output is None:
                            if queued:
                                continue  # the open turn ended: the queued prompt's turn comes next
                            break
                        # The model answered without the output tool: ask for it (forced where possible).
                        reminder = output.missed()
                        output.check(agent.name)
                        reminder_message: MessageDict = {"role": "user", "content": [{"text": reminder}]}
                        await agent._append_message(reminder_message, invocation_state)
                        yield MessageEvent(reminder_message)
                        force_output = True
                        continue
                    pending = PendingTools(tool_uses, {}, {})
                metrics.tool_calls += sum(
                    1 for t in pending.tool_uses if t["toolUseId"] not in pending.completed
                )
                turn = TurnControl()
                agent._pending_tools = pending  # the turn's ledger, saved with the agent while tools run
                results = await _run_tools(agent, pending, invocation_state, turn, output, checkpoint)
                for progress in turn.progress:
                    yield progress
                if results is None:
                    stop_reason = "interrupt"
                    pending.queued = queued  # saved with the ledger: the answers' invocation runs it
                    break
                agent._pending_tools = pending = None
                if output is not None and output.value is None:
                    output.check(agent.name)  # invalid output tool input past the retries
                for tool_outcome in results:
                    yield ToolResultEvent(tool_outcome)
                tool_message: MessageDict = {"role": "user", "content": [{"toolResult": r} for r in results]}
                await agent._append_message(tool_message, invocation_state)
                yield MessageEvent(tool_message)
                if turn.ended:
                    # A tool ended the turn (a handoff): close it with an assistant message, no model call.
                    closing = " ".join(turn.messages)
                    message = {
                        "role": "assistant",
                        "content": [{"text": closing if closing.strip() else EMPTY_REPLY}],
                    }
                    await agent._append_message(message, invocation_state)
                    yield MessageEvent(message)
                    stop_reason = "end_turn"
                    if queued:
                        continue
                    break

            # The manager may cut the front of the history: a failure after this (the turn's save) must
            # still put the history back as it was. (The null manager never does: no copy for it.)
            if not isinstance(agent.conversation_manager, NullConversationManager):
                checkpoint.before_reshape()
            await agent.conversation_manager.apply_management(agent)
            metrics.latency_ms = (time.perf_counter() - started) * 1000
            open_interrupts = (
                [i for i in agent._pending_tools.interrupts.values() if i.response is None]
                if agent._pending_tools
                else []
            )
            result = AgentResult(
                message,
                stop_reason,
                invocation_state,
                metrics,
                open_interrupts,
                output=output.value if output is not None else None,
                resumed=resumed,
            )
        except BaseException as exc:
            checkpoint.roll_back()
            if isinstance(exc, Exception):
                if checkpoint.kept_open:
                    exc.add_note(
                        f"agent {agent.name!r}: a side-effecting tool of this turn ran, so the turn was kept "
                        "open rather than rolled back: the agent's next invocation resumes it"
                    )
                await hooks.invoke(AfterInvocation(agent, invocation_state, exception=exc))
            raise
        await _end_turn(agent, invocation_state, checkpoint, result)
        agent_span.usage(metrics.usage)
        agent_span.set(orchestra__stop_reason=stop_reason)
        agent_span.content("gen_ai.output.messages", tracing.output_messages, message, stop_reason)
        yield ResultEvent(result)


async def _end_turn(
    agent: Agent, invocation_state: dict[str, Any], checkpoint: Checkpoint, result: AgentResult
) -> None:
    """``AfterInvocation``, where session managers save the turn: its commit point. Until one says the
    turn is stored, a failure (a full disk, a lost answer, a cancellation) rolls it back like any other,
    so that an error means nothing was stored; after that, the turn is kept and the error says so."""
    event = AfterInvocation(agent, invocation_state, result=result)
    try:
        await agent.hooks.invoke(event)
    except BaseException as exc:
        if not event.stored:
            checkpoint.roll_back()
        else:
            checkpoint.close()
            if isinstance(exc, Exception):
                exc.add_note(
                    f"agent {agent.name!r}: its turn was stored in the session before this error, and is kept"
                )
        raise
    checkpoint.close()


async def _stream_model(
    agent: Agent, checkpoint: Checkpoint, output: OutputTool | None = None, force_output: bool = False
) -> AsyncGenerator[Any, None]:
    """Stream one model turn; on a context-window overflow let the conversation manager reduce and retry."""
    model = agent.model
    specs = agent.tool_registry.specs()
    options: dict[str, Any] = {}
    if output is not None:
        specs = [*specs, output.spec]
        if force_output and supports_tool_choice(model):
            options["tool_choice"] = output.name
    while True:
        started = False
        try:
            events = model.stream(
                agent.messages, tool_specs=specs, system_prompt=agent.system_prompt, **options
            )
            # Close the provider's stream in this task when we stop early (a task group inside it must
            # be left by the task that entered it).
            async with closing_stream(events):
                async for event in events:
                    started = True
                    yield event
            return
        except ContextWindowOverflowError as exc:
            if started:
                raise
            checkpoint.before_reshape()
            await agent.conversation_manager.reduce_context(agent, exc)


def closing_stream(events: AsyncIterator[Any]) -> AbstractAsyncContextManager[Any]:
    """``aclosing`` for async generators; a no-op for iterators that cannot be closed."""
    return aclosing(cast(AsyncGenerator[Any, None], events)) if hasattr(events, "aclose") else nullcontext()
