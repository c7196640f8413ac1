"""``SlidingWindowConversationManager``: keeps the newest messages, drops the oldest."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestra._logging import get_logger
from orchestra.conversation._base import is_clean_start, note_dropped
from orchestra.errors import ContextWindowOverflowError

if TYPE_CHECKING:
    from orchestra.agent.protocol import AgentLike

__all__ = ["SlidingWindowConversationManager"]

log = get_logger("orchestra.conversation")

TRUNCATED_RESULT = "The tool result was too large to keep in the conversation and was removed."


class SlidingWindowConversationManager:
    """Keeps at most ``window_size`` messages (the default manager).

    Args:
        window_size: the most messages kept after an invocation.
        should_truncate_results: on a context-window overflow, first replace the largest tool result with
            a short note before dropping whole messages.

    The window only ever starts at a user message that is not a tool result (the start of a turn), so a
    tool call is never separated from its result. After an invocation the window is cut at the oldest
    turn start that leaves at most ``window_size`` messages; when the newest turn alone is longer, the
    history is cut at that turn's start and a warning is logged: a turn that succeeded is never failed
    after the fact. On a context-window overflow the cut must fit, or ``ContextWindowOverflowError``
    is raised (the invocation is then rolled back).
    """

    def __init__(self, window_size: int = 40, should_truncate_results: bool = True) -> None:
        if window_size < 1:
            raise ValueError(f"window_size must be at least 1, got {window_size}")
        self.window_size = window_size
        self.should_truncate_results = should_truncate_results
        self.removed_message_count = 0

    async def apply_management(self, agent: AgentLike) -> None:
        messages = agent.messages
        excess = len(messages) - self.window_size
        if excess <= 0:
            return
        cut = next((i for i in range(excess, len(messages)) if is_clean_start(messages, i)), None)
        if cut is None:
            cut = next((i for i in range(excess - 1, 0, -1) if is_clean_start(messages, i)), 0)
            log.warning(
                "conversation.window_exceeded",
                agent=agent.name,
                window_size=self.window_size,
                kept=len(messages) - cut,
                hint="the newest turn alone is longer than the window; raise window_size",
            )
        if cut:
            note_dropped(agent, messages[:cut])
            del messages[:cut]
            self.removed_message_count += cut

    async def reduce_context(self, agent: AgentLike, error: Exception | None = None) -> None:
        if error is not None and self.should_truncate_results and self._truncate_largest_result(agent):
            return
        excess = len(agent.messages) - self.window_size
        self._trim(agent, max(excess, 2), error)

    def _trim(self, agent: AgentLike, count: int, error: Exception | None = None) -> None:
        messages = agent.messages
        cut = count
        while cut < len(messages) and not is_clean_start(messages, cut):
            cut += 1
        if cut >= len(messages):
            raise ContextWindowOverflowError(
                f"agent {agent.name!r}: cannot reduce the context any further: no message after the first "
                f"{count} starts a clean turn ({len(messages)} messages in the history)"
            ) from error
        note_dropped(agent, messages[:cut])
        del messages[:cut]
        self.removed_message_count += cut

    def _truncate_largest_result(self, agent: AgentLike) -> bool:
        best: tuple[int, int, int] | None = None  # (size, message index, block index)
        for i, message in enumerate(agent.messages):
            for j, block in enumerate(message["content"]):
                result = block.get("toolResult")
                if result is None or result["content"] == [{"text": TRUNCATED_RESULT}]:
                    continue
                size = len(str(result["content"]))
                if best is None or size > best[0]:
                    best = (size, i, j)
        if best is None:
            return False
        _, i, j = best
        old = agent.messages[i]
        content = list(old["content"])
        result = content[j]["toolResult"]
        content[j] = {
            "toolResult": {
                "toolUseId": result["toolUseId"],
                "status": "error",
                "content": [{"text": TRUNCATED_RESULT}],
            }
        }
        # Replace the message rather than mutate it: sessions detect changes by identity.
        agent.messages[i] = {**old, "content": content}
        return True

    def get_state(self) -> dict[str, Any]:
        return {"__name__": type(self).__name__, "removed_message_count": self.removed_message_count}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.removed_message_count = int(state.get("removed_message_count", 0))
