"""Test doubles and capture helpers, for your own tests as for ours.

``ScriptedModel`` and ``FunctionModel`` make agents deterministic and offline; ``EventRecorder`` records
the hook events an agent (or orchestrator) emits; ``collect`` gathers what ``stream_async`` yields.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import TypeVar

from orchestra.hooks import HookEvent, HookRegistry
from orchestra.hooks import events as _agent_events
from orchestra.models.scripted import FunctionModel, ModelRequest, Reply, ScriptedModel, ToolCall
from orchestra.storage import Expect, Storage
from orchestra.storage._base import ForwardingStorage

__all__ = [
    "CountingStorage",
    "EventRecorder",
    "FunctionModel",
    "ModelRequest",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "collect",
]

E = TypeVar("E", bound=HookEvent)
T = TypeVar("T")


class EventRecorder:
    """A hook provider that records every event of the given types (all agent events by default).

    Example::

        recorder = EventRecorder()
        agent = Agent(model=ScriptedModel(["hi"]), hooks=[recorder])
        agent("hello")
        assert [type(e).__name__ for e in recorder.events][:2] == ["AgentInitialized", "BeforeInvocation"]
    """

    def __init__(self, *event_types: type[HookEvent]) -> None:
        self.event_types = event_types or tuple(
            getattr(_agent_events, name) for name in _agent_events.__all__
        )
        self.events: list[HookEvent] = []

    def register_hooks(self, registry: HookRegistry) -> None:
        for event_type in self.event_types:
            registry.add_callback(event_type, self.events.append)

    def of_type(self, event_type: type[E]) -> list[E]:
        """The recorded events of one type, in order."""
        return [e for e in self.events if isinstance(e, event_type)]

    @property
    def names(self) -> list[str]:
        """The recorded events' class names, in order."""
        return [type(e).__name__ for e in self.events]


async def collect(stream: AsyncIterable[T]) -> list[T]:
    """Everything an async iterator yields (e.g. ``await collect(agent.stream_async("hi"))``)."""
    return [item async for item in stream]


class CountingStorage(ForwardingStorage):
    """Wraps a storage and counts what goes through it (bytes written, writes, reads).

    Example::

        storage = CountingStorage(LocalFileStorage(tmp_path))
        ...
        print(storage.bytes_written, storage.writes)
    """

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.bytes_written = 0
        self.writes = 0
        self.reads = 0

    async def read(self, key: str) -> tuple[bytes, str] | None:
        self.reads += 1
        return await self.inner.read(key)

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        version = await self.inner.write(key, data, expect=expect)
        self.writes += 1
        self.bytes_written += len(data)
        return version
