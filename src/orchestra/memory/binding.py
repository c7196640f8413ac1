"""Which store and which namespace a call of an agent's memory is bound to.

A namespace is bound in two places, and the model names neither:

- where the tools or the context hook are made (``memory_tools(store, namespace=("users", "alice"))``);
- by whoever runs the agent, in its invocation state: ``invocation_state["memory"]`` holds the store (a
  Graph or Swarm built with ``memory=store`` puts it there for every node; the server puts the caller's
  workspace store there) and ``invocation_state["memory_namespace"]`` the namespace the caller is bound to
  (the server puts the caller's there).

Where a caller is bound (a namespace in the invocation state), its store wins over the one the tools
were made with. A namespace made with the tools is relative to the bound one: the server's caller
``("users", "u1")`` with tools made for ``("notes",)`` reads and writes ``("users", "u1", "notes")`` and
nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orchestra._ids import validate_id
from orchestra._imports import import_object
from orchestra.errors import ConfigurationError

if TYPE_CHECKING:
    from orchestra.memory.store import MemoryStore

__all__ = [
    "MEMORY_NAMESPACE_STATE_KEY",
    "MEMORY_STATE_KEY",
    "bound_memory",
    "checked_namespace",
    "load_embedder",
    "search_query",
]

MEMORY_STATE_KEY = "memory"
MEMORY_NAMESPACE_STATE_KEY = "memory_namespace"


def checked_namespace(namespace: Sequence[str] | str | None, what: str = "namespace") -> tuple[str, ...]:
    """A namespace as a tuple of ids (a string is one part); ``ConfigurationError`` naming the bad part.

    Each part follows the storage's id rule (letters, digits, '.', '_', '-', not starting with '.'),
    so no part can hold a separator or climb out with ``..``.
    """
    if namespace is None:
        return ()
    parts = (namespace,) if isinstance(namespace, str) else tuple(namespace)
    for index, part in enumerate(parts):
        try:
            validate_id(part, f"{what}[{index}]")
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{what} {parts!r}: {exc}") from None
    return parts


def bound_memory(
    store: MemoryStore | None, namespace: tuple[str, ...], invocation_state: Mapping[str, Any]
) -> tuple[MemoryStore, tuple[str, ...]]:
    """The store and the whole namespace one call uses: the invocation's bound namespace, then the
    tools' own; ``LookupError`` (said to the model as an error result) when either is missing."""
    bound = invocation_state.get(MEMORY_STATE_KEY)
    if MEMORY_NAMESPACE_STATE_KEY in invocation_state and bound is not None:
        store = bound  # a caller is bound (the server): its store, never one the tools were made with
    elif store is None:
        store = bound
    if store is None:
        raise LookupError(
            "no memory store: make the tools with memory_tools(store, ...), or run the agent in a Graph or "
            "Swarm built with memory=store"
        )
    root = checked_namespace(invocation_state.get(MEMORY_NAMESPACE_STATE_KEY), "the bound namespace")
    whole = root + namespace
    if not whole:
        raise LookupError(
            "no memory namespace: make the tools with memory_tools(namespace=(...)), or run the agent "
            "where the caller's namespace is bound (orchestra serve)"
        )
    return store, whole


def search_query(store: MemoryStore, query: str | None) -> str | None:
    """The query a search of ``store`` can take: without an embedder, none (the newest items first)."""
    return query if store.embedder is not None else None


def load_embedder(path: str) -> Any:
    """The ``Embedder`` at ``package.module:name``: the object itself, or what calling it returns."""
    found = import_object(path)
    if callable(getattr(found, "embed", None)) and not isinstance(found, type):
        return found
    if callable(found):
        try:
            made = found()
        except Exception as exc:  # user code: say what it raised, where the config names it
            raise ConfigurationError(
                f"{path!r}: calling it to make an Embedder raised {type(exc).__name__}: {exc}"
            ) from None
        if callable(getattr(made, "embed", None)):
            return made
    raise ConfigurationError(
        f"{path!r} is not an Embedder (an object with embed()) nor a function returning one"
    )
