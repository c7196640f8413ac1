"""One model call of the agent loop: the request, the reply read from the model's stream, its span."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from orchestra.agent._spans import InvocationSpans, NoSpans
from orchestra.agent.result import AgentStreamEvent, TextChunkEvent, ToolCallEvent
from orchestra.agent.structured import InvocationOutput
from orchestra.agent.turn import Checkpoint, TurnAgent
from orchestra.errors import ContextWindowOverflowError
from orchestra.messages import MessageDict, Usage
from orchestra.models import StreamStop, TextDelta, ToolUseEvent, UsageEvent

__all__ = ["ModelCall"]


class ModelCall:
    """One model request and its reply: an async context manager, and inside it an async iterator.

    Iterating reads the model's stream into ``message``, ``tool_uses``, ``usage`` and ``stop_reason``; a
    streamed invocation's reader gets a ``TextChunkEvent`` or ``ToolCallEvent`` per chunk, and without a
    reader the whole stream is read in one step. A ``ContextWindowOverflowError`` before the first chunk
    lets the conversation manager reduce the history (past ``checkpoint``), and the request is made
    again. Leaving the block closes the provider's stream (in this task, as a task group inside it
    needs) and the call's ``chat`` span (see ``_spans.py``).
    """

    __slots__ = (
        "_events",
        "_started",
        "agent",
        "checkpoint",
        "message",
        "output",
        "spans",
        "stop_reason",
        "streaming",
        "system_context",
        "text",
        "tool_uses",
        "usage",
    )

    def __init__(
        self,
        agent: TurnAgent,
        output: InvocationOutput,
        checkpoint: Checkpoint,
        spans: InvocationSpans | NoSpans,
        streaming: bool,
        system_context: list[str] | None = None,
    ) -> None:
        self.agent = agent
        self.system_context = system_context or []  # hooks' text for this request only (BeforeModelCall)
        self.output = output
        self.checkpoint = checkpoint
        self.spans = spans
        self.streaming = streaming
        self.text: list[str] = []
        self.tool_uses: list[dict[str, Any]] = []
        self.usage: Usage | None = None
        self.stop_reason = "end_turn"
        self.message: MessageDict = {"role": "assistant", "content": []}
        self._events: AsyncIterator[Any] | None = None  # the provider's stream while it is open
        self._started = False

    async def __aenter__(self) -> ModelCall:
        self.spans.enter_chat(self.agent)
        return self

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._close()
            if typ is None:
                self._reply()
        except BaseException as error:
            self.spans.exit_chat(type(error), error, error.__traceback__)
            raise
        self.spans.exit_chat(typ, exc, tb)

    def __aiter__(self) -> ModelCall:
        return self

    async def __anext__(self) -> AgentStreamEvent:
        while True:
            try:
                if self._events is None:
                    self._events = self._open()
                event = await self._events.__anext__()
            except StopAsyncIteration:
                self._events = None  # finished: nothing to close
                raise
            except ContextWindowOverflowError as exc:
                if self._started:
                    raise
                await self._reduce(exc)
                continue
            self._started = True
            if isinstance(event, TextDelta):
                self.text.append(event.text)
                if self.streaming:
                    return TextChunkEvent(event.text)
            elif isinstance(event, ToolUseEvent):
                tool_use = {"toolUseId": event.tool_use_id, "name": event.name, "input": event.input}
                self.tool_uses.append(tool_use)
                if self.streaming:
                    return ToolCallEvent(tool_use)
            elif isinstance(event, UsageEvent):
                self.usage = event.usage
            elif isinstance(event, StreamStop):
                self.stop_reason = event.reason

    def _open(self) -> AsyncIterator[Any]:
        agent = self.agent
        model = agent.model
        specs, options = self.output.request(agent.tool_registry.specs(), model)
        system_prompt = agent.system_prompt
        if self.system_context:
            system_prompt = "\n\n".join(part for part in (system_prompt, *self.system_context) if part)
        return model.stream(agent.messages, tool_specs=specs, system_prompt=system_prompt, **options)

    async def _close(self) -> None:
        events, self._events = self._events, None
        if events is not None and hasattr(events, "aclose"):
            await events.aclose()

    async def _reduce(self, error: ContextWindowOverflowError) -> None:
        """The request does not fit the context window: let the conversation manager reduce the history."""
        await self._close()
        self.checkpoint.before_reshape()
        await self.agent.conversation_manager.reduce_context(self.agent, error)

    def _reply(self) -> None:
        reply = "".join(self.text)
        content: list[dict[str, Any]] = [{"text": reply}] if reply.strip() else []
        content.extend({"toolUse": tool_use} for tool_use in self.tool_uses)
        self.message = {"role": "assistant", "content": content}
        self.spans.chat_reply(self.message, self.stop_reason, self.usage)
