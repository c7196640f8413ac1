"""``MemoryContext``: the memories most relevant to the conversation, given to the model before each call.

Before each model call it searches the bound namespace (see ``binding.py``) with the newest user text as
the query and puts the best items, best first, into the call's ``system_context`` (the request's system
prompt, this call only: never the history, never a session); a store without an embedder gives its newest
items. It stops before the added text would pass ``max_tokens``.

Tokens are estimated, not counted by a tokenizer: ``ceil(characters / 4)``, the usual rule of thumb for
English under the providers' BPE tokenizers. Set the bound with that margin in mind; the estimate needs no
model-specific tokenizer and is the same on every provider.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orchestra.hooks import BeforeModelCall, HookRegistry
from orchestra.memory.binding import bound_memory, checked_namespace, search_query

if TYPE_CHECKING:
    from orchestra.memory._records import MemoryItem
    from orchestra.memory.store import MemoryStore

__all__ = ["MemoryContext", "estimate_tokens"]

HEADER = "Relevant memories (from earlier conversations):"


def estimate_tokens(text: str) -> int:
    """The tokens ``text`` is counted as: ``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / 4)


def _last_user_text(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        texts = [block["text"] for block in message.get("content", []) if isinstance(block.get("text"), str)]
        if texts:
            return "\n".join(texts)
    return ""


def render(items: Sequence[MemoryItem], max_tokens: int) -> str | None:
    """The items as lines under a header, best first, as many as fit in ``max_tokens`` (None: none fit)."""
    lines = [HEADER]
    used = estimate_tokens(HEADER)
    for item in items:
        text = item.value.get("text") if isinstance(item.value.get("text"), str) else str(item.value)
        line = f"- {item.key}: {text}"
        cost = estimate_tokens(line) + 1  # and its newline
        if used + cost > max_tokens:
            break
        lines.append(line)
        used += cost
    return "\n".join(lines) if len(lines) > 1 else None


class MemoryContext:
    """A hook provider: ``Agent(hooks=[MemoryContext(store, namespace=("users", user_id))])``.

    Args:
        store: the ``MemoryStore``; None: the one the run binds (see ``memory_tools``).
        namespace: where to search, under the namespace the run binds; None: the bound one itself.
        limit: how many items to search for.
        max_tokens: the bound on what is added, header included (tokens estimated as characters / 4).
    """

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        namespace: Sequence[str] | str | None = None,
        limit: int = 5,
        max_tokens: int = 400,
    ) -> None:
        if limit < 1 or max_tokens < 1:
            raise ValueError(
                f"MemoryContext needs limit >= 1 and max_tokens >= 1, not {limit} and {max_tokens}"
            )
        self.store = store
        self.namespace = checked_namespace(namespace)
        self.limit = limit
        self.max_tokens = max_tokens

    def register_hooks(self, registry: HookRegistry) -> None:
        registry.add_callback(BeforeModelCall, self._before_model_call)

    async def _before_model_call(self, event: BeforeModelCall) -> None:
        query = _last_user_text(event.agent.messages)
        if not query:
            return
        store, namespace = bound_memory(self.store, self.namespace, event.invocation_state)
        items = await store.search_async(namespace, query=search_query(store, query), limit=self.limit)
        text = render(items, self.max_tokens)
        if text is not None:
            event.system_context.append(text)
