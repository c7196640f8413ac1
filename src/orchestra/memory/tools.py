"""``memory_tools``: remember, recall and forget, as tools an agent's model calls.

The rules:

- The namespace is bound, never asked: where the tools are made, and by whoever runs the agent (see
  ``binding.py``). No tool takes a namespace argument, and an argument the schema does not declare is
  refused (the input model forbids extras), so a model cannot name another user's namespace.
- A key the model gives is one id by the storage's rule (no '/', no leading '.'), so it cannot climb out
  of the namespace either; a key the model leaves out is made up.
- What a tool stores is ``{"text": ..., "tags": [...]}``: the store embeds ``text`` (its default field).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from orchestra._ids import validate_id
from orchestra.memory.binding import bound_memory, checked_namespace, search_query
from orchestra.tools import FunctionTool, ToolContext, tool

if TYPE_CHECKING:
    from orchestra.memory.store import MemoryStore

__all__ = ["MemoryTools", "memory_tools"]

MAX_RECALL = 20


class MemoryTools:
    """The three memory tools of one binding; iterable, and a tool provider, so both
    ``tools=[memory_tools(...)]`` and ``tools=[*memory_tools(...)]`` work."""

    def __init__(
        self, store: MemoryStore | None = None, namespace: Sequence[str] | str | None = None
    ) -> None:
        self.store = store
        self.namespace = checked_namespace(namespace)
        self.remember, self.recall, self.forget = _make_tools(self)

    def agent_tools(self) -> list[FunctionTool]:
        return [self.remember, self.recall, self.forget]

    def __iter__(self) -> Iterator[FunctionTool]:
        return iter(self.agent_tools())

    def where(self, context: ToolContext) -> tuple[MemoryStore, tuple[str, ...]]:
        """The store and namespace this call reads and writes."""
        return bound_memory(self.store, self.namespace, context.invocation_state)


def memory_tools(
    store: MemoryStore | None = None, *, namespace: Sequence[str] | str | None = None
) -> MemoryTools:
    """Tools to remember, recall and forget, each call scoped to one namespace the model cannot change.

    Args:
        store: the ``MemoryStore``; None: the one the run binds (``invocation_state["memory"]``: a Graph or
            Swarm's ``memory=``, the server's workspace store).
        namespace: where the tools read and write, under the namespace the run binds to its caller (the
            server binds each caller's own); None: the bound namespace itself.
    """
    return MemoryTools(store, namespace)


def _checked_key(key: str) -> str:
    try:
        return validate_id(key, "key")
    except ValueError as exc:
        raise ValueError(f"{exc} (a key names one memory; the namespace is not yours to choose)") from None


def _make_tools(owner: MemoryTools) -> tuple[FunctionTool, FunctionTool, FunctionTool]:
    @tool(context=True)
    async def remember(
        text: str, tool_context: ToolContext, key: str | None = None, tags: list[str] | None = None
    ) -> str:
        """Remember a fact for later conversations (a preference, a detail about the user, a decision).

        Args:
            text: the fact, in a sentence that makes sense on its own.
            key: a short name for it (letters, digits, '.', '_', '-'); the same key replaces the old fact.
            tags: words to find it by.
        """
        store, namespace = owner.where(tool_context)
        name = _checked_key(key) if key else uuid.uuid4().hex[:12]
        value: dict[str, Any] = {"text": text}
        if tags:
            value["tags"] = list(tags)
        await store.put_async(namespace, name, value)
        return f"Remembered as {name!r}."

    @tool(context=True)
    async def recall(query: str, tool_context: ToolContext, limit: int = 5) -> list[dict[str, Any]]:
        """Recall remembered facts, the most relevant to the query first (the newest first when the
        store has no embedder).

        Args:
            query: what to look for, in words.
            limit: how many facts at most (1-20).
        """
        store, namespace = owner.where(tool_context)
        limit = max(1, min(limit, MAX_RECALL))
        items = await store.search_async(namespace, query=search_query(store, query), limit=limit)
        return [
            {"key": item.key, "text": item.value.get("text", item.value), "score": item.score}
            for item in items
        ]

    @tool(context=True)
    async def forget(key: str, tool_context: ToolContext) -> str:
        """Forget one remembered fact, by its key.

        Args:
            key: the fact's key, as remember or recall gave it.
        """
        store, namespace = owner.where(tool_context)
        name = _checked_key(key)
        if await store.get_async(namespace, name) is None:
            raise LookupError(f"nothing is remembered under {name!r}")
        await store.delete_async(namespace, name)
        return f"Forgot {name!r}."

    return remember, recall, forget
