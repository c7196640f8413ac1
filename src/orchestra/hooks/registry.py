"""The hook registry: typed events in, plain callbacks out."""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = [
    "HookCallback",
    "HookEvent",
    "HookProvider",
    "HookRegistry",
    "OrchestratorSessionManager",
    "SessionManager",
]


class HookEvent:
    """Base of every hook event.

    Callbacks of events whose ``reverse_order`` is true run last-registered first, so that what a plugin
    set up "before" is torn down "after" in the mirror order.
    """

    reverse_order: bool = False


E = TypeVar("E", bound=HookEvent)
HookCallback = Callable[[E], "Awaitable[None] | None"]


@runtime_checkable
class HookProvider(Protocol):
    """A plugin: registers its callbacks on a registry (session managers are hook providers)."""

    def register_hooks(self, registry: HookRegistry) -> None:
        """Add this provider's callbacks to ``registry``."""
        ...


@runtime_checkable
class SessionManager(Protocol):
    """What an agent's ``session_manager`` is: a hook provider with a session id.

    ``SnapshotSessionManager`` and the repository managers implement it (and ``OrchestratorSessionManager``).
    """

    @property
    def session_id(self) -> str: ...

    def register_hooks(self, registry: HookRegistry) -> None: ...


@runtime_checkable
class OrchestratorSessionManager(SessionManager, Protocol):
    """A session manager that can also persist a Graph or Swarm (its ``session_manager``)."""

    def register_multi_agent_hooks(self, registry: HookRegistry) -> None:
        """Add the callbacks that save and restore an orchestrator's run."""
        ...


class HookRegistry:
    """Callbacks by event type. Callbacks may be sync or async; they run one after another."""

    def __init__(self) -> None:
        self._callbacks: defaultdict[type[HookEvent], list[Callable[[Any], Any]]] = defaultdict(list)

    def add_callback(self, event_type: type[E], callback: HookCallback[E]) -> None:
        """Call ``callback(event)`` every time an event of ``event_type`` is invoked."""
        if not (isinstance(event_type, type) and issubclass(event_type, HookEvent)):
            raise TypeError(f"hooks attach to HookEvent subclasses, not {event_type!r}")
        self._callbacks[event_type].append(callback)

    def add_hook(self, provider: HookProvider) -> None:
        """Let ``provider`` register its callbacks."""
        provider.register_hooks(self)

    def has_callbacks(self, event_type: type[HookEvent]) -> bool:
        """Whether any callback listens to ``event_type`` (lets hot paths skip building the event)."""
        return bool(self._callbacks.get(event_type))

    async def invoke(self, event: E) -> E:
        """Run every callback registered for the event's type; returns the (possibly modified) event."""
        callbacks = self._callbacks.get(type(event))
        if not callbacks:
            return event
        for callback in reversed(callbacks) if event.reverse_order else callbacks:
            outcome = callback(event)
            if inspect.isawaitable(outcome):
                await outcome
        return event
