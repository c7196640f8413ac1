"""``NullConversationManager``: keeps every message, never trims."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestra.errors import ContextWindowOverflowError

if TYPE_CHECKING:
    from orchestra.agent.protocol import AgentLike

__all__ = ["NullConversationManager"]


class NullConversationManager:
    """Leaves the history alone; a context-window overflow is passed on to the caller."""

    def __init__(self) -> None:
        self.removed_message_count = 0

    async def apply_management(self, agent: AgentLike) -> None:
        return None

    async def reduce_context(self, agent: AgentLike, error: Exception | None = None) -> None:
        raise ContextWindowOverflowError(
            f"agent {agent.name!r}: the conversation ({len(agent.messages)} messages) exceeds the model's "
            "context window and NullConversationManager does not reduce it; use "
            "SlidingWindowConversationManager or SummarizingConversationManager"
        ) from error

    def get_state(self) -> dict[str, Any]:
        return {"__name__": type(self).__name__, "removed_message_count": self.removed_message_count}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.removed_message_count = int(state.get("removed_message_count", 0))
