"""Test doubles and capture helpers, for your own tests as for ours.

``ScriptedModel`` and ``FunctionModel`` make agents deterministic and offline; ``EventRecorder`` records
the hook events an agent (or orchestrator) emits; ``collect`` gathers what ``stream_async`` yields;
``CountingStorage`` counts what goes through a storage and ``FaultyStorage`` fails chosen calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from orchestra.errors import (
    StorageError,
    StorageFullError,
    StorageOutcomeUnknownError,
    StorageUnavailableError,
)
from orchestra.hooks import HookEvent, HookRegistry
from orchestra.hooks import events as _agent_events
from orchestra.models.scripted import FunctionModel, ModelRequest, Reply, ScriptedModel, ToolCall
from orchestra.storage import AppendStorage, Expect, ForwardingStorage, Storage, appendable

__all__ = [
    "CountingStorage",
    "EventRecorder",
    "Fault",
    "FaultyStorage",
    "FunctionModel",
    "HashEmbedder",
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
        self.writes = 0  # appends included
        self.reads = 0

    async def read(self, key: str) -> tuple[bytes, str] | None:
        self.reads += 1
        return await self.inner.read(key)

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        version = await self.inner.write(key, data, expect=expect)
        self.writes += 1
        self.bytes_written += len(data)
        return version

    @property
    def appends(self) -> bool:
        """Whether appends are offered (``AppendStorage``): when the inner storage offers them."""
        return appendable(self.inner) is not None

    async def append(self, key: str, data: bytes, *, at: int, tail: bytes = b"") -> int:
        length = await _appender(self.inner).append(key, data, at=at, tail=tail)
        self.writes += 1
        self.bytes_written += len(data)
        return length

    async def read_from(self, key: str, offset: int) -> bytes | None:
        self.reads += 1
        return await _appender(self.inner).read_from(key, offset)


def _appender(storage: Storage) -> AppendStorage:
    inner = appendable(storage)
    if inner is None:
        raise TypeError(f"{storage!r} does not offer appends")
    return inner


FaultKind = Literal["full", "unavailable", "reset"]


@dataclass
class Fault:
    """One planned failure of ``FaultyStorage``: the ``nth`` call from now of ``operation`` on a key that
    contains ``key_contains`` fails with ``kind``, before it takes effect or (``after``) after."""

    operation: str
    key_contains: str = ""
    kind: FaultKind = "unavailable"
    after: bool = False
    nth: int = 1

    def error(self, operation: str, key: str) -> StorageError:
        """What an honest backend says: it knows a full disk or a refusal came before the write was made;
        a lost answer (``after``, or a reset) leaves the outcome unknown."""
        reason = {"full": "[Errno 28] No space left on device", "unavailable": "503 SlowDown"}.get(
            self.kind, "connection reset by peer"
        )
        message = f"injected fault: {operation} of {key!r}: {reason}"
        if self.after or self.kind == "reset":
            return StorageOutcomeUnknownError(
                f"{message}; the answer was lost", operation=operation, key=key, reason=reason
            )
        cls = StorageFullError if self.kind == "full" else StorageUnavailableError
        return cls(f"{message}; nothing was changed", operation=operation, key=key, reason=reason)


class FaultyStorage(ForwardingStorage):
    """Wraps a storage and fails chosen calls, before or after they take effect, to test what a full disk,
    a refused request or a lost answer does to the code above.

    Example::

        storage = FaultyStorage(LocalFileStorage(tmp_path))
        storage.fail("write", "snapshot_latest.json", kind="full")  # the next snapshot rewrite: disk full
        storage.fail("write", "/journal/", after=True)  # the next record is written, its answer is lost

    ``made`` lists the writes and deletes that took effect, ``(operation, key)``, injected ones included.
    Batch calls (``read_many``, ``write_many``, ``delete_many``) go through the single calls, so faults
    planned for those apply to them.

    With ``appends=True`` it passes appends on where the inner storage offers them (``AppendStorage``:
    local files), with faults planned for ``"append"`` (and ``"read"`` for ``read_from``); by default it
    offers none, so a session journal writes one value per record through it.
    """

    def __init__(self, inner: Storage, *, appends: bool = False) -> None:
        super().__init__(inner)
        self._appends = appends
        self.faults: list[Fault] = []
        self.made: list[tuple[str, str]] = []
        self.injected: list[StorageError] = []

    def fail(
        self,
        operation: str,
        key_contains: str = "",
        *,
        kind: FaultKind = "unavailable",
        after: bool = False,
        nth: int = 1,
    ) -> Fault:
        """Plan a fault (see ``Fault``); returns it."""
        fault = Fault(operation, key_contains, kind, after, nth)
        self.faults.append(fault)
        return fault

    def _due(self, operation: str, key: str) -> Fault | None:
        for fault in self.faults:
            if fault.operation == operation and fault.key_contains in key:
                fault.nth -= 1
                if fault.nth == 0:
                    self.faults.remove(fault)
                    return fault
        return None

    def _raise(self, fault: Fault, operation: str, key: str) -> None:
        error = fault.error(operation, key)
        self.injected.append(error)
        raise error

    async def read(self, key: str) -> tuple[bytes, str] | None:
        fault = self._due("read", key)
        if fault is not None:
            self._raise(fault, "read", key)
        return await self.inner.read(key)

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        fault = self._due("write", key)
        if fault is not None and not fault.after:
            self._raise(fault, "write", key)
        version = await self.inner.write(key, data, expect=expect)
        self.made.append(("write", key))
        if fault is not None:
            self._raise(fault, "write", key)
        return version

    @property
    def appends(self) -> bool:
        return self._appends and appendable(self.inner) is not None

    async def append(self, key: str, data: bytes, *, at: int, tail: bytes = b"") -> int:
        fault = self._due("append", key)
        if fault is not None and not fault.after:
            self._raise(fault, "append", key)
        length = await _appender(self.inner).append(key, data, at=at, tail=tail)
        self.made.append(("append", key))
        if fault is not None:
            self._raise(fault, "append", key)
        return length

    async def read_from(self, key: str, offset: int) -> bytes | None:
        fault = self._due("read", key)
        if fault is not None:
            self._raise(fault, "read", key)
        return await _appender(self.inner).read_from(key, offset)

    async def delete(self, key: str) -> None:
        fault = self._due("delete", key)
        if fault is not None and not fault.after:
            self._raise(fault, "delete", key)
        await self.inner.delete(key)
        self.made.append(("delete", key))
        if fault is not None:
            self._raise(fault, "delete", key)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        fault = self._due("list", prefix)
        if fault is not None:
            self._raise(fault, "list", prefix)
        return await self.inner.list(prefix, start_after=start_after, limit=limit)


class HashEmbedder:
    """A deterministic, offline ``Embedder`` for tests: each word (lower-cased, letters and digits) adds
    +1 or -1 to one of ``dimensions`` buckets picked by its BLAKE2 hash, so texts sharing words are similar
    and the same text always gets the same vector, in every process.

    Example::

        embedder = HashEmbedder()
        tea, coffee = embedder.vector("likes green tea"), embedder.vector("likes coffee")
        assert len(tea) == 128 and tea != coffee
    """

    def __init__(self, dimensions: int = 128) -> None:
        self.dimensions = dimensions
        self.calls = 0  # embed() calls, for tests that count them

    def __repr__(self) -> str:
        return f"HashEmbedder({self.dimensions})"

    def vector(self, text: str) -> list[float]:
        import hashlib
        import re

        out = [0.0] * self.dimensions
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "big") % self.dimensions
            out[bucket] += 1.0 if digest[4] & 1 else -1.0
        return out

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        self.calls += 1
        return [self.vector(text) for text in texts]
