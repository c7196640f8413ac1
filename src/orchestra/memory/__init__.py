"""Memory that outlives a session: namespaced JSON items with TTLs and semantic search, on any storage.

``MemoryStore`` keeps items in namespaces (``("users", user_id, "preferences")``) on an orchestra storage
(in memory, local files, SQLite, PostgreSQL; encrypted if wrapped in ``EncryptedStorage``), finds them by
meaning through an ``Embedder`` (``BedrockEmbedder``, ``OpenAIEmbedder``; ``orchestra.testing.HashEmbedder``
in tests), and erases a namespace with ``forget``. Agents use it through ``memory_tools`` (remember,
recall, forget in a namespace the model cannot change) and ``MemoryContext`` (relevant memories in each
model request). See docs/memory.md.
"""

from orchestra.memory._records import FILTER_OPERATORS, MemoryItem
from orchestra.memory.context import MemoryContext
from orchestra.memory.embedders import BedrockEmbedder, Embedder, OpenAIEmbedder
from orchestra.memory.store import MemoryStore
from orchestra.memory.tools import MemoryTools, memory_tools

__all__ = [
    "FILTER_OPERATORS",
    "BedrockEmbedder",
    "Embedder",
    "MemoryContext",
    "MemoryItem",
    "MemoryStore",
    "MemoryTools",
    "OpenAIEmbedder",
    "memory_tools",
]
