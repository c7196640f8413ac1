"""Conversation managers: keep an agent's history within the model's context window."""

from orchestra.conversation._base import ConversationManager, note_dropped
from orchestra.conversation.null import NullConversationManager
from orchestra.conversation.sliding_window import SlidingWindowConversationManager
from orchestra.conversation.summarizing import SummarizingConversationManager

__all__ = [
    "ConversationManager",
    "NullConversationManager",
    "SlidingWindowConversationManager",
    "SummarizingConversationManager",
    "note_dropped",
]
