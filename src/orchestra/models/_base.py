"""The ``Model`` protocol every provider implements, and the events a model streams."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable
from urllib.parse import urlsplit

from orchestra.messages import MessageDict, Usage

__all__ = [
    "Model",
    "ModelEvent",
    "ModelTelemetry",
    "StopReason",
    "StreamStop",
    "TextDelta",
    "ToolSpec",
    "ToolUseEvent",
    "UsageEvent",
    "complete_text",
]

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filtered", "interrupt"]


class ToolSpec(TypedDict):
    """A tool as a model sees it: name, description and a JSON schema of its input."""

    name: str
    description: str
    inputSchema: dict[str, Any]  # the wire name of the field


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text, as it streams in."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolUseEvent:
    """A complete tool call requested by the model."""

    tool_use_id: str
    name: str
    input: Any


@dataclass(frozen=True, slots=True)
class UsageEvent:
    """Token usage of this model call."""

    usage: Usage


@dataclass(frozen=True, slots=True)
class StreamStop:
    """The model ended its turn; always the last event of a stream."""

    reason: StopReason


ModelEvent = TextDelta | ToolUseEvent | UsageEvent | StreamStop


@dataclass(frozen=True, slots=True)
class ModelTelemetry:
    """What a model call is in the OpenTelemetry GenAI conventions (``orchestra.tracing`` reads it).

    A model may expose one as ``telemetry``; without it the ``name`` is read as ``provider:model``.

    Attributes:
        provider: ``gen_ai.provider.name`` (``openai``, ``aws.bedrock``, ...).
        request_model: ``gen_ai.request.model``: the model id exactly as sent on the wire.
        server_address: ``server.address`` of the endpoint, if remote.
        server_port: ``server.port`` of the endpoint, if remote.
        remote: a call over the network (a CLIENT span) rather than in this process (INTERNAL).
    """

    provider: str
    request_model: str
    server_address: str | None = None
    server_port: int | None = None
    remote: bool = True

    @classmethod
    def from_url(cls, provider: str, request_model: str, url: str | None) -> ModelTelemetry:
        """Telemetry for a model served at ``url`` (its host and port become ``server.*``)."""
        parsed = urlsplit(url or "")
        port = parsed.port or {"https": 443, "http": 80}.get(parsed.scheme)
        return cls(provider, request_model, parsed.hostname, port)


@runtime_checkable
class Model(Protocol):
    """A language model: takes the conversation, the tools and the system prompt, streams a reply.

    Implementations must not mutate ``messages``: the list is the agent's own history, passed by
    reference so that a long conversation is never copied per call. A provider that cannot fit the
    request in its context window raises :class:`~orchestra.errors.ContextWindowOverflowError`.

    A model may also take a keyword ``tool_choice: str | None``, the name of a tool it must call: structured
    output passes it to force its final tool on the models that take it (the built-in ones do) and asks
    in words on the others.
    """

    @property
    def name(self) -> str:
        """A short, human readable name used in errors and logs (e.g. ``openai:gpt-4o``)."""
        ...

    def stream(
        self,
        messages: Sequence[MessageDict],
        *,
        tool_specs: Sequence[ToolSpec] = (),
        system_prompt: str | None = None,
    ) -> AsyncIterator[ModelEvent]:
        """Stream one model turn: text deltas and tool calls, then usage and a ``StreamStop``."""
        ...


async def complete_text(
    model: Model,
    messages: Sequence[MessageDict],
    *,
    tool_specs: Sequence[ToolSpec] = (),
    system_prompt: str | None = None,
) -> str:
    """Run one model turn and return only its text (used for summaries and other side requests)."""
    parts: list[str] = []
    async for event in model.stream(messages, tool_specs=tool_specs, system_prompt=system_prompt):
        if isinstance(event, TextDelta):
            parts.append(event.text)
    return "".join(parts)
