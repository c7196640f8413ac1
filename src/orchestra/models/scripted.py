"""Deterministic, offline models for tests and examples: ``ScriptedModel`` and ``FunctionModel``."""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import anyio

from orchestra.errors import ModelError, ScriptExhaustedError
from orchestra.messages import MessageDict, Usage, text_of
from orchestra.models._base import (
    ModelEvent,
    ModelTelemetry,
    StreamStop,
    TextDelta,
    ToolSpec,
    ToolUseEvent,
    UsageEvent,
)

__all__ = ["FunctionModel", "ModelRequest", "Reply", "ScriptedModel", "ToolCall"]


@dataclass(frozen=True)
class ToolCall:
    """A scripted tool call: the model asks for tool ``name`` with ``input``."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    tool_use_id: str | None = None


Reply: TypeAlias = str | ToolCall | Sequence[str | ToolCall]
"""One model turn: final text, one tool call, or a list of text parts and (parallel) tool calls."""


KEEP_MESSAGES = 200
"""How many of a request's newest messages the deterministic models record (see ``ModelRequest``)."""


@dataclass(frozen=True)
class ModelRequest:
    """What a deterministic model was asked: the messages, tools and system prompt.

    ``messages`` is a shallow copy of the request's newest messages: all of them for conversations up to
    the model's ``keep_messages`` (200 by default), the newest ``keep_messages`` beyond that, so that a
    long conversation costs the same per call as a short one; ``message_count`` is the full count.
    """

    messages: list[MessageDict]
    tool_specs: list[ToolSpec]
    system_prompt: str | None
    message_count: int = 0
    tool_choice: str | None = None

    @property
    def last_text(self) -> str:
        """The text of the newest message of the request."""
        return text_of(self.messages[-1]) if self.messages else ""


def _estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


@functools.lru_cache(maxsize=4096)
def _usage(input_tokens: int, output_tokens: int) -> Usage:
    """The usage of a reply (one frozen object per count: a pydantic model costs more to build than the
    rest of a scripted reply)."""
    return Usage(
        input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=input_tokens + output_tokens
    )


def _reply_events(reply: Reply, ids: Callable[[], str], input_tokens: int) -> list[ModelEvent]:
    parts: Sequence[str | ToolCall] = [reply] if isinstance(reply, str | ToolCall) else reply
    events: list[ModelEvent] = []
    output_tokens = 0
    calls = 0
    for part in parts:
        if isinstance(part, str):
            output_tokens += _estimate_tokens(part)
            events.append(TextDelta(part))
        elif isinstance(part, ToolCall):
            calls += 1
            output_tokens += _estimate_tokens(part.name) + 1
            events.append(ToolUseEvent(part.tool_use_id or ids(), part.name, dict(part.input)))
        else:
            raise TypeError(
                f"a scripted reply is a str, a ToolCall or a list of them, not {type(part).__name__}"
            )
    events.append(UsageEvent(_usage(input_tokens, output_tokens)))
    events.append(StreamStop("tool_use" if calls else "end_turn"))
    return events


def _check_tools(model: str, reply: Reply, tool_specs: Sequence[ToolSpec]) -> None:
    """A reply that calls a tool the agent was not given fails here, loudly: a real model's made-up tool
    name only gets an error result (and a warning in the log), which a test would not notice."""
    if isinstance(reply, str):
        return
    parts: Sequence[str | ToolCall] = [reply] if isinstance(reply, ToolCall) else reply
    names = [spec["name"] for spec in tool_specs]
    for part in parts:
        if isinstance(part, ToolCall) and part.name not in names:
            raise ModelError(
                f"{model} calls tool {part.name!r}, which the agent does not have (its tools: "
                f"{', '.join(names) or 'none'}): fix the reply, or give the agent the tool "
                "(allow_unknown_tools=True tests how an agent answers a made-up tool name)"
            )


class _RecordingModel:
    """Shared parts of the deterministic models: request log, tool-use ids, latency, token estimate."""

    def __init__(self, name: str, latency: float, keep_messages: int, allow_unknown_tools: bool) -> None:
        self._name = name
        self.latency = latency
        self.keep_messages = keep_messages
        self.allow_unknown_tools = allow_unknown_tools
        self.requests: list[ModelRequest] = []
        counter = itertools.count(1)
        self._next_id = lambda: f"tooluse_{next(counter)}"

    @property
    def name(self) -> str:
        return self._name

    def reset(self) -> None:
        """Forget the recorded requests and start over, as a model built anew would (``orchestra serve``
        does this for an agent it reuses for turns that keep nothing)."""
        self.requests.clear()
        counter = itertools.count(1)
        self._next_id = lambda: f"tooluse_{next(counter)}"
        if hasattr(self, "_position"):
            self._position = 0

    @property
    def telemetry(self) -> ModelTelemetry:
        return ModelTelemetry("orchestra", self._name, remote=False)  # it runs in this process

    def _record(
        self,
        messages: Sequence[MessageDict],
        tool_specs: Sequence[ToolSpec],
        system_prompt: str | None,
        tool_choice: str | None = None,
    ) -> int:
        kept = list(messages[-self.keep_messages :]) if self.keep_messages else []
        request = ModelRequest(kept, list(tool_specs), system_prompt, len(messages), tool_choice)
        self.requests.append(request)
        # Deterministic, cheap estimate: only the newest message and the system prompt are counted, so the
        # cost of a call does not grow with the history.
        return _estimate_tokens(request.last_text) + _estimate_tokens(system_prompt or "")

    async def _delay(self) -> None:
        if self.latency:
            await anyio.sleep(self.latency)


class ScriptedModel(_RecordingModel):
    """A model that answers with canned replies, in order.

    Args:
        replies: one entry per model turn: a string (final text), a ``ToolCall``, or a list of strings and
            tool calls (one turn with parallel tool calls).
        latency: seconds to wait before each reply, to simulate a real provider.
        name: how the model is named in errors.

        follow_history: pick the reply by how many assistant messages the conversation already holds,
            instead of by call count. A restored agent (a resumed run, a new process) then continues its
            script where it stopped, as a real model would continue the conversation.
        keep_messages: how many of each request's newest messages ``requests`` records.
        allow_unknown_tools: let a reply call a tool the agent does not have (the agent answers it with
            an error result, as it would a real model's); by default that raises ``ModelError`` naming the
            tool and the agent's tools.

    Every request is recorded in ``requests``. Running out of replies raises ``ScriptExhaustedError``.
    """

    def __init__(
        self,
        replies: Sequence[Reply] = (),
        *,
        latency: float = 0.0,
        name: str = "scripted",
        follow_history: bool = False,
        keep_messages: int = KEEP_MESSAGES,
        allow_unknown_tools: bool = False,
    ) -> None:
        super().__init__(name, latency, keep_messages, allow_unknown_tools)
        self.replies: list[Reply] = list(replies)
        self.follow_history = follow_history
        self._position = 0

    @property
    def remaining(self) -> int:
        """How many replies have not been used yet."""
        return len(self.replies) - self._position

    async def stream(
        self,
        messages: Sequence[MessageDict],
        *,
        tool_specs: Sequence[ToolSpec] = (),
        system_prompt: str | None = None,
        tool_choice: str | None = None,
    ) -> AsyncIterator[ModelEvent]:
        input_tokens = self._record(messages, tool_specs, system_prompt, tool_choice)
        if self.follow_history:
            self._position = sum(1 for m in messages if m["role"] == "assistant")
        if self._position >= len(self.replies):
            raise ScriptExhaustedError(
                f"ScriptedModel {self._name!r} has no reply left: it was given {len(self.replies)} "
                f"replies and this is call {len(self.requests)}; add replies to its script"
            )
        reply = self.replies[self._position]
        if not self.allow_unknown_tools:
            _check_tools(f"ScriptedModel {self._name!r}", reply, tool_specs)
        self._position += 1
        await self._delay()
        for event in _reply_events(reply, self._next_id, input_tokens):
            yield event


ReplyFunction: TypeAlias = Callable[[list[MessageDict], list[ToolSpec]], "Reply | Awaitable[Reply]"]


class FunctionModel(_RecordingModel):
    """A model whose replies a Python function decides.

    Args:
        fn: ``fn(messages, tool_specs)`` returning what a ``ScriptedModel`` reply may be (sync or async).
        latency: seconds to wait before each reply.
        name: how the model is named in errors; defaults to the function's name.
        keep_messages: how many of each request's newest messages ``requests`` records.
        allow_unknown_tools: as for ``ScriptedModel``.

    ``fn`` gets the agent's history itself (read it, do not change it).
    """

    def __init__(
        self,
        fn: ReplyFunction,
        *,
        latency: float = 0.0,
        name: str | None = None,
        keep_messages: int = KEEP_MESSAGES,
        allow_unknown_tools: bool = False,
    ) -> None:
        name = name or f"function:{getattr(fn, '__name__', 'fn')}"
        super().__init__(name, latency, keep_messages, allow_unknown_tools)
        self.fn = fn

    async def stream(
        self,
        messages: Sequence[MessageDict],
        *,
        tool_specs: Sequence[ToolSpec] = (),
        system_prompt: str | None = None,
        tool_choice: str | None = None,
    ) -> AsyncIterator[ModelEvent]:
        input_tokens = self._record(messages, tool_specs, system_prompt, tool_choice)
        await self._delay()
        reply = self.fn(messages, list(tool_specs))  # type: ignore[arg-type]
        if inspect.isawaitable(reply):
            reply = await reply
        if not self.allow_unknown_tools:
            _check_tools(f"FunctionModel {self._name!r}", reply, tool_specs)
        for event in _reply_events(reply, self._next_id, input_tokens):
            yield event
