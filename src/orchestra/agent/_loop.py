"""The agent loop: one model call, then one round of tool calls, until the model ends its turn.

``run_invocation`` is the whole loop. ``Invocation`` holds one invocation's state and takes its steps:
``model_call`` opens a ``ModelCall`` (the request, its reply read from the model's stream, its usage and
span), ``model_answered`` stores the reply and says what comes next, and ``run_tools`` runs the ledger's
round of tool calls (``_tools.py``) and stores their results. The turn's state (the ledger, the
checkpoint, how an invocation starts) is ``turn.py``'s; what an output type asks of the loop is
``structured.py``'s ``InvocationOutput``; budgets, retries and sessions come in through hooks.

An invocation nobody streams (``Agent.invoke_async``) builds no event objects: ``streaming`` is False,
the loop yields nothing, and a model call reads its whole stream in one step.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from types import TracebackType
from typing import Any

from orchestra.agent._model_call import ModelCall
from orchestra.agent._spans import spans_for
from orchestra.agent._tools import run_tools
from orchestra.agent.result import (
    AgentMetrics,
    AgentResult,
    AgentStreamEvent,
    MessageEvent,
    ResultEvent,
    ToolResultEvent,
)
from orchestra.agent.structured import InvocationOutput
from orchestra.agent.turn import Checkpoint, PendingTools, TurnAgent, start_turn
from orchestra.conversation import NullConversationManager
from orchestra.errors import MaxCyclesError
from orchestra.history import EMPTY_REPLY
from orchestra.hooks import AfterInvocation, AfterModelCall, BeforeInvocation, BeforeModelCall, MessageAdded
from orchestra.messages import MessageDict, Usage
from orchestra.tools import TurnControl

__all__ = ["Invocation", "append_message", "run_invocation"]


async def run_invocation(invocation: Invocation) -> AsyncGenerator[AgentStreamEvent, None]:
    """One invocation: the body of ``Agent.stream_async`` (and, unstreamed, of ``invoke_async``).

    If it does not finish (an exception, a cancellation, the caller closing the stream), the checkpoint
    rolls the history back to where it started; ``AfterInvocation`` then sees the rolled-back history
    (hooks run for exceptions, not for cancellations, where nothing may be awaited).
    """
    with invocation:  # its span
        await invocation.begin()
        try:
            await invocation.start()
            for event in invocation.take_events():
                yield event
            while not invocation.done:
                if invocation.pending is None:  # one model call
                    call = await invocation.model_call()
                    try:
                        async with call:
                            async for event in call:  # only a streamed invocation's reader gets any
                                yield event
                    except Exception as exc:
                        if await invocation.model_failed(exc):
                            continue  # a hook asked for the same call again
                        raise
                    await invocation.model_answered(call)
                else:  # one round of tool calls
                    await invocation.run_tools()
                for event in invocation.take_events():
                    yield event
            result = await invocation.finish()
        except BaseException as exc:
            await invocation.fail(exc)
            raise
        await invocation.commit(result)
    if invocation.streaming:
        yield ResultEvent(result)


async def append_message(agent: TurnAgent, message: MessageDict, invocation_state: dict[str, Any]) -> None:
    """Add ``message`` to the history (``MessageAdded`` hooks see it)."""
    agent.messages.append(message)
    if agent.hooks.has_callbacks(MessageAdded):
        await agent.hooks.invoke(MessageAdded(agent, message, invocation_state))


class Invocation:
    """One invocation of an agent while it runs: its turn's state and its steps (see the module docstring).

    Attributes:
        pending: the ledger of the round of tool calls to run next, or None when the model is asked next.
        done: the turn ended (or stopped for interrupt responses): ``finish`` comes next.
        streaming: someone reads the invocation's events; without a reader none is built.
        result: the result, once finished.
    """

    __slots__ = (
        "agent",
        "checkpoint",
        "cycles",
        "done",
        "events",
        "hooks",
        "message",
        "output",
        "pending",
        "prompt",
        "queued",
        "result",
        "resumed",
        "retrying",
        "spans",
        "started",
        "state",
        "stop_reason",
        "streaming",
        "tool_calls",
        "usage",
    )

    def __init__(
        self,
        agent: TurnAgent,
        prompt: Any,
        invocation_state: dict[str, Any],
        output: InvocationOutput,
        *,
        streaming: bool,
    ) -> None:
        self.agent = agent
        self.hooks = agent.hooks
        self.prompt = prompt
        self.state = invocation_state
        self.checkpoint = Checkpoint(agent)
        self.output = output
        self.streaming = streaming
        self.events: list[AgentStreamEvent] = []
        self.pending: PendingTools | None = None
        self.queued: list[MessageDict] = []  # a new prompt that waits for the open turn to finish
        self.resumed = False
        self.done = False
        self.message: MessageDict = {"role": "assistant", "content": []}
        self.stop_reason = "end_turn"
        self.usage: Usage | None = None
        self.cycles = self.tool_calls = 0
        self.retrying = False  # the model call failed and a hook asked for it again: not a new cycle
        self.result: AgentResult | None = None
        self.started = time.perf_counter()
        self.spans = spans_for(agent)

    def __enter__(self) -> Invocation:
        self.spans.enter_invocation()
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.spans.exit_invocation(typ, exc, tb)

    # -- the steps --------------------------------------------------------------------------------------

    def take_events(self) -> list[AgentStreamEvent]:
        """The events of the last step, for a reader (none without one)."""
        if not self.events:
            return _NO_EVENTS
        events, self.events = self.events, []
        return events

    async def append(self, message: MessageDict) -> None:
        await append_message(self.agent, message, self.state)
        if self.streaming:
            self.events.append(MessageEvent(message))

    async def begin(self) -> None:
        if self.hooks.has_callbacks(BeforeInvocation):
            await self.hooks.invoke(BeforeInvocation(self.agent, self.state))

    async def start(self) -> None:
        """The prompt, or the open turn to finish first (``turn.start_turn``)."""
        agent = self.agent
        start = start_turn(agent, self.prompt)
        self.pending, self.queued, self.resumed = agent.pending_tools, start.queued, start.resumed
        for message in start.prompt:
            await self.append(message)
        if agent.messages:
            self.message = agent.messages[-1]

    async def model_call(self) -> ModelCall:
        """The next model request (a new cycle, unless it repeats a failed one)."""
        agent = self.agent
        if not self.retrying:
            self.cycles += 1
            if self.cycles > agent.max_cycles:
                raise MaxCyclesError(
                    f"agent {agent.name!r}: the model kept calling tools for {agent.max_cycles} cycles "
                    "without ending its turn; raise Agent(max_cycles=...) or check the tools' results"
                )
        context: list[str] = []
        if self.hooks.has_callbacks(BeforeModelCall):
            context = (await self.hooks.invoke(BeforeModelCall(agent, self.state))).system_context
        return ModelCall(agent, self.output, self.checkpoint, self.spans, self.streaming, context)

    async def model_failed(self, exc: Exception) -> bool:
        """The model call raised: whether a hook asked for it again (``AfterModelCall.retry``)."""
        failed = await self.hooks.invoke(AfterModelCall(self.agent, self.state, exception=exc))
        self.retrying = failed.retry
        return failed.retry

    async def model_answered(self, call: ModelCall) -> None:
        """Store the model's reply: its tool calls are the next round, or its turn ends."""
        self.retrying = False
        message, self.stop_reason = call.message, call.stop_reason
        usage = call.usage if call.usage is not None else Usage()
        self.usage = usage if self.usage is None else self.usage + usage
        if self.hooks.has_callbacks(AfterModelCall):
            await self.hooks.invoke(
                AfterModelCall(self.agent, self.state, message, self.stop_reason, usage=usage)
            )
        self.message = message
        # No provider accepts an empty assistant message: an empty reply is stored as a marker, while the
        # result keeps what the model said (nothing).
        await self.append(
            message if message["content"] else {"role": "assistant", "content": [{"text": EMPTY_REPLY}]}
        )
        if call.tool_uses:
            self.pending = PendingTools(call.tool_uses)
            return
        reminder = self.output.unfinished(self.agent.name)  # structured output asks for its tool
        if reminder is not None:
            await self.append(reminder)
        else:
            await self.end_turn()

    async def run_tools(self) -> None:
        """Run the ledger's round of tool calls; store their results, or stop for interrupt responses."""
        agent, pending = self.agent, self.pending
        assert pending is not None
        self.tool_calls += len(pending.waiting())
        turn = TurnControl(pending.interrupts, self.streaming)
        agent.pending_tools = pending  # the turn's ledger, saved with the agent while tools run
        finished = await run_tools(agent, pending, self.state, turn, self.output, self.checkpoint)
        if self.streaming:
            self.events.extend(turn.progress)
        if not finished:
            # The ledger keeps the queued prompt: the invocation that answers the interrupts runs it.
            self.stop_reason, pending.queued, self.done = "interrupt", self.queued, True
            return
        agent.pending_tools = self.pending = None
        self.output.after_tools(agent.name)
        results = pending.results()
        if self.streaming:
            self.events.extend(ToolResultEvent(result) for result in results)
        await self.append({"role": "user", "content": [{"toolResult": result} for result in results]})
        if turn.ended:
            # A tool ended the turn (a handoff): close it with an assistant message, no model call.
            closing = " ".join(turn.messages)
            self.message = {
                "role": "assistant",
                "content": [{"text": closing if closing.strip() else EMPTY_REPLY}],
            }
            self.stop_reason = "end_turn"
            await self.append(self.message)
            await self.end_turn()

    async def end_turn(self) -> None:
        """The turn is closed: the queued prompt's turn comes next, or the invocation is done."""
        queued, self.queued = self.queued, []
        for message in queued:
            await self.append(message)
        self.done = not queued

    # -- the end ----------------------------------------------------------------------------------------

    async def finish(self) -> AgentResult:
        """The conversation manager's turn, then the result."""
        agent = self.agent
        manager = agent.conversation_manager
        # The manager may cut the front of the history: a failure after this (the turn's save) must
        # still put the history back as it was. (The null manager never does: no copy for it.)
        if not isinstance(manager, NullConversationManager):
            self.checkpoint.before_reshape()
        await manager.apply_management(agent)
        metrics = AgentMetrics(
            self.usage if self.usage is not None else Usage(),
            self.cycles,
            self.tool_calls,
            (time.perf_counter() - self.started) * 1000,
        )
        pending = agent.pending_tools
        self.result = AgentResult(
            self.message,
            self.stop_reason,
            self.state,
            metrics,
            pending.open_interrupts() if pending is not None else [],
            output=self.output.value,
            resumed=self.resumed,
        )
        return self.result

    async def fail(self, exc: BaseException) -> None:
        """The invocation failed: roll its turn back (or keep it open, see ``Checkpoint``); hooks see it."""
        checkpoint = self.checkpoint
        checkpoint.roll_back()
        if isinstance(exc, Exception):
            if checkpoint.kept_open:
                exc.add_note(
                    f"agent {self.agent.name!r}: a side-effecting tool of this turn ran, so the turn was kept "
                    "open rather than rolled back: the agent's next invocation resumes it"
                )
            await self.hooks.invoke(AfterInvocation(self.agent, self.state, exception=exc))

    async def commit(self, result: AgentResult) -> None:
        """``AfterInvocation``, where session managers save the turn: its commit point. Until one says the
        turn is stored, a failure (a full disk, a lost answer, a cancellation) rolls it back like any other,
        so that an error means nothing was stored; after that, the turn is kept and the error says so."""
        checkpoint = self.checkpoint
        if self.hooks.has_callbacks(AfterInvocation):
            event = AfterInvocation(self.agent, self.state, result=result)
            try:
                await self.hooks.invoke(event)
            except BaseException as exc:
                if not event.stored:
                    checkpoint.roll_back()
                else:
                    checkpoint.close()
                    if isinstance(exc, Exception):
                        exc.add_note(
                            f"agent {self.agent.name!r}: its turn was stored in the session before this "
                            "error, and is kept"
                        )
                raise
        checkpoint.close()
        self.spans.invocation_result(result.message, result.stop_reason, result.metrics.usage)


_NO_EVENTS: list[AgentStreamEvent] = []  # never appended to: take_events hands out new lists
