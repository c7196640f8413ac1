"""The ``ConversationManager`` protocol and the shared rule for where a history may be cut."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from orchestra.messages import MessageDict

if TYPE_CHECKING:
    from orchestra.agent.protocol import AgentLike

__all__ = ["ConversationManager", "is_clean_start"]


@runtime_checkable
class ConversationManager(Protocol):
    """Keeps an agent's history within the model's context window.

    ``apply_management`` runs after every invocation; ``reduce_context`` runs when the model raised
    ``ContextWindowOverflowError`` (then the call is retried) and raises that error itself when it cannot
    reduce any further. Managers change ``agent.messages`` by removing or replacing whole messages, never
    by mutating a message in place (sessions rely on it to save only what changed).
    """

    removed_message_count: int

    async def apply_management(self, agent: AgentLike) -> None: ...

    async def reduce_context(self, agent: AgentLike, error: Exception | None = None) -> None: ...

    def get_state(self) -> dict[str, Any]:
        """A JSON dict that sessions persist."""
        ...

    def restore_state(self, state: dict[str, Any]) -> None:
        """Take back what ``get_state`` returned."""
        ...


def note_dropped(agent: AgentLike, messages: Sequence[MessageDict]) -> None:
    """A manager is taking ``messages`` out of ``agent``'s history: keep them where a session wants them."""
    if agent.dropped_messages is not None:
        agent.dropped_messages.extend(messages)


def is_clean_start(messages: Sequence[MessageDict], index: int) -> bool:
    """Whether the history may start at ``index``: a user message that answers no earlier tool call.

    Cutting anywhere else would leave a toolResult without its toolUse, which models reject.
    """
    message = messages[index]
    return message["role"] == "user" and not any("toolResult" in block for block in message["content"])
