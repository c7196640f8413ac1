"""``SummarizingConversationManager``: replaces the oldest messages with a model-written summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestra.conversation._base import note_dropped
from orchestra.errors import ContextWindowOverflowError
from orchestra.messages import MessageDict, user_message
from orchestra.models import Model, complete_text, resolve_model

if TYPE_CHECKING:
    from orchestra.agent.protocol import AgentLike

__all__ = ["SummarizingConversationManager"]

SUMMARY_PROMPT = (
    "Summarize the conversation above for your own later use: keep every fact, decision, open question "
    "and tool result that may still matter. Answer with the summary only."
)
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


class SummarizingConversationManager:
    """On a context-window overflow, summarizes the oldest part of the history into one message.

    Args:
        summary_ratio: the share of the history (0.1-0.8) to fold into the summary at each reduction.
        preserve_recent_messages: the newest messages that are never summarized.
        summarization_model: the model that writes the summary; defaults to the agent's own model.
    """

    def __init__(
        self,
        summary_ratio: float = 0.3,
        preserve_recent_messages: int = 10,
        summarization_model: Model | str | None = None,
    ) -> None:
        if not 0.1 <= summary_ratio <= 0.8:
            raise ValueError(f"summary_ratio must be between 0.1 and 0.8, got {summary_ratio}")
        self.summary_ratio = summary_ratio
        self.preserve_recent_messages = preserve_recent_messages
        self.summarization_model = resolve_model(summarization_model) if summarization_model else None
        self.removed_message_count = 0
        self.summary_message: MessageDict | None = None

    async def apply_management(self, agent: AgentLike) -> None:
        return None

    async def reduce_context(self, agent: AgentLike, error: Exception | None = None) -> None:
        messages = agent.messages
        limit = len(messages) - self.preserve_recent_messages
        split = self._split_point(messages, max(1, int(len(messages) * self.summary_ratio)), limit)
        if split is None:
            raise ContextWindowOverflowError(
                f"agent {agent.name!r}: cannot reduce the context any further: only "
                f"{len(messages)} messages, {self.preserve_recent_messages} of which are preserved"
            ) from error
        model = self.summarization_model or agent.model
        # The part to summarize ends with a user message; the request adds the instruction to it, so
        # roles keep alternating (Converse refuses two user messages in a row).
        last = messages[split - 1]
        ask = {"role": "user", "content": [*last["content"], {"text": SUMMARY_PROMPT}]}
        summary = await complete_text(
            model,
            [*messages[: split - 1], ask],
            tool_specs=agent.tool_registry.specs(),
            system_prompt=agent.system_prompt,
        )
        self.summary_message = user_message(SUMMARY_PREFIX + summary)
        # A previous summary sits at index 0 and is folded into the new one, so count it out.
        previous = self._previous_summary(messages) if messages else None
        removed = split - (1 if previous is not None else 0)
        note_dropped(agent, [m for m in messages[:split] if m is not previous])  # a summary is not a turn
        messages[:split] = [self.summary_message]
        self.removed_message_count += removed

    @staticmethod
    def _previous_summary(messages: list[MessageDict]) -> MessageDict | None:
        first = messages[0]
        content = first["content"]
        if first["role"] == "user" and content and content[0].get("text", "").startswith(SUMMARY_PREFIX):
            return first
        return None

    @staticmethod
    def _split_point(messages: list[MessageDict], target: int, limit: int) -> int | None:
        """The first index in [target, limit) where an assistant message begins.

        The summary is a user message, so the kept part starts with the assistant to keep roles
        alternating; the message before an assistant message is a user message, so no tool call is
        separated from its result.
        """
        for split in range(max(target, 1), limit):
            if messages[split]["role"] == "assistant":
                return split
        return None

    def get_state(self) -> dict[str, Any]:
        return {
            "__name__": type(self).__name__,
            "removed_message_count": self.removed_message_count,
            "summary_message": self.summary_message,
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        self.removed_message_count = int(state.get("removed_message_count", 0))
        self.summary_message = state.get("summary_message")
