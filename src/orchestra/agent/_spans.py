"""The agent loop's spans (see ``orchestra.tracing``): ``invoke_agent`` per invocation, ``chat`` per model
call, shaped by the GenAI conventions. While nothing records spans the loop gets ``NO_SPANS``, which does
nothing at all."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from orchestra import tracing
from orchestra.messages import MessageDict, Usage

if TYPE_CHECKING:
    from orchestra.agent.protocol import AgentLike

__all__ = ["NO_SPANS", "InvocationSpans", "NoSpans", "spans_for"]


def spans_for(agent: AgentLike) -> InvocationSpans | NoSpans:
    """The spans of one invocation of ``agent``: recorded ones, or ``NO_SPANS`` when nothing records."""
    return InvocationSpans(agent, tracing.model_telemetry(agent.model)) if tracing.recording() else NO_SPANS


class NoSpans:
    """Spans nobody records: every call does nothing."""

    def enter_invocation(self) -> None:
        return None

    def exit_invocation(self, *exc_info: Any) -> None:
        return None

    def invocation_result(self, message: MessageDict, stop_reason: str, usage: Usage) -> None:
        return None

    def enter_chat(self, agent: AgentLike) -> None:
        return None

    def exit_chat(self, *exc_info: Any) -> None:
        return None

    def chat_reply(self, message: MessageDict, stop_reason: str, usage: Usage | None) -> None:
        return None


NO_SPANS = NoSpans()


class InvocationSpans:
    """The recorded spans of one invocation: its ``invoke_agent`` span, and its model calls' ``chat``
    spans inside it, one at a time."""

    def __init__(self, agent: AgentLike, telemetry: Any) -> None:
        self.telemetry = telemetry
        attributes = {
            **tracing.chat_attributes(telemetry, "invoke_agent"),
            "gen_ai.agent.name": agent.name,
            "gen_ai.agent.id": agent.agent_id,
            "gen_ai.conversation.id": getattr(agent.session_manager, "session_id", None),
        }
        self._invocation: AbstractContextManager[Any] = tracing.span(f"invoke_agent {agent.name}", attributes)
        self._chat: AbstractContextManager[Any] | None = None
        self.invocation: Any = None
        self.chat: Any = None

    def enter_invocation(self) -> None:
        self.invocation = self._invocation.__enter__()

    def exit_invocation(self, *exc_info: Any) -> None:
        self._invocation.__exit__(*exc_info)

    def invocation_result(self, message: MessageDict, stop_reason: str, usage: Usage) -> None:
        self.invocation.usage(usage)
        self.invocation.set(orchestra__stop_reason=stop_reason)
        self.invocation.content("gen_ai.output.messages", tracing.output_messages, message, stop_reason)

    def enter_chat(self, agent: AgentLike) -> None:
        telemetry = self.telemetry
        kind: tracing.SpanKind = "client" if telemetry.remote else "internal"
        self._chat = tracing.span(f"chat {telemetry.request_model}", tracing.chat_attributes(telemetry), kind)
        self.chat = self._chat.__enter__()
        self.chat.content("gen_ai.input.messages", tracing.genai_messages, agent.messages)
        self.chat.content("gen_ai.system_instructions", tracing.system_instructions, agent.system_prompt)

    def exit_chat(self, *exc_info: Any) -> None:
        chat, self._chat = self._chat, None
        if chat is not None:
            chat.__exit__(*exc_info)

    def chat_reply(self, message: MessageDict, stop_reason: str, usage: Usage | None) -> None:
        self.chat.usage(usage if usage is not None else Usage())
        self.chat.set(gen_ai__response__finish_reasons=[tracing.finish_reason(stop_reason)])
        self.chat.content("gen_ai.output.messages", tracing.output_messages, message, stop_reason)
