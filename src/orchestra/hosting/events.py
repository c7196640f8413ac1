"""A run's events, kept with the run in bounded form, replayed from any id and followed live.

Every run that streams (a background run, or ``?stream=true`` on invoke) writes its events to
``events/<run_id>/<chunk>.json`` in the workspace's storage: numbered chunks, each created with a
create-only write and holding the id of its first event and the events in order. An event is given to a
client only once its chunk is written, so an id names one event on every server and after any restart:
a client that reconnects with ``Last-Event-ID`` gets exactly the events after it, then follows the run.

- ``EventLog`` is the writer (one per running run): ``append`` queues an event, a writer task writes the
  queued events as the next chunk (events that arrive meanwhile go in the chunk after), and local
  followers read the written events from memory. A server that takes a run over continues the log
  after its last written event (``EventLog.resume``). A chunk number another writer took first (a server
  taken for gone that was not) makes the writer read the tail again and renumber what it had not
  written yet: nothing sent is ever renumbered.
- ``stored_events`` reads a log from storage (a run on another server, or one that ended);
  ``streams.py`` follows a run with it, or with the writer, until its terminal event (``result`` or
  ``error``).

Bounded: past ``max_events`` a run keeps (and sends) one ``truncated`` event and then only its lifecycle
events (``status``, ``state``, node and handoff events, the terminal event).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio

from orchestra._json import dumps
from orchestra._logging import get_logger
from orchestra.agent.result import MessageEvent, TextChunkEvent, ToolCallEvent, ToolResultEvent
from orchestra.errors import StorageConflictError, StorageError
from orchestra.multiagent.events import HandoffEvent, NodeStartEvent, NodeStopEvent, NodeStreamEvent
from orchestra.storage import ABSENT, Storage, read_many

__all__ = ["TERMINAL", "Event", "EventLog", "delete_events", "last_event", "stored_events", "stream_event"]

log = get_logger("orchestra.server")

Event = tuple[int, str, Any]
"""An event as kept: its id (1, 2, ... within the run), its name and its JSON data."""

TERMINAL = frozenset({"result", "error"})
LIFECYCLE = frozenset({"status", "state", "node_start", "node_stop", "handoff", "truncated", *TERMINAL})


def _prefix(run_id: str) -> str:
    return f"events/{run_id}/"


def _chunk_key(run_id: str, number: int) -> str:
    return f"{_prefix(run_id)}{number:08d}.json"


def _parse(data: bytes) -> tuple[int, list[list[Any]]]:
    chunk = json.loads(data)
    return int(chunk["first"]), list(chunk["events"])


class EventLog:
    """The events of one running run (see the module docstring)."""

    def __init__(
        self, storage: Storage, run_id: str, max_events: int, *, next_id: int = 1, next_chunk: int = 0
    ) -> None:
        self.storage = storage
        self.run_id = run_id
        self.max_events = max_events
        self.events: list[Event] = []  # written, in order (this writer's; a resumed log's are in storage)
        self.first_local = next_id  # the id of this writer's first event
        self._next_id = next_id
        self._next_chunk = next_chunk
        self._queued: list[tuple[str, Any]] = []
        self._kept = next_id - 1
        self._truncated = next_id - 1 >= max_events - 1
        self._changed = anyio.Event()
        self._wake = anyio.Event()
        self._closing = False
        self.ended = False  # the terminal event is written
        self.closed = False  # the writer has stopped (after the terminal event, or giving up)
        self.failed: BaseException | None = None

    @classmethod
    async def resume(cls, storage: Storage, run_id: str, max_events: int) -> EventLog:
        """A writer that continues a log after its last written event (a run taken over, or a queued
        run's first events written by the server that accepted it)."""
        keys = await storage.list(_prefix(run_id))
        if not keys:
            return cls(storage, run_id, max_events)
        found = await storage.read(keys[-1])
        if found is None:  # cannot happen: chunks are never deleted while their run is followed
            return cls(storage, run_id, max_events)
        first, items = _parse(found[0])
        number = int(keys[-1].rsplit("/", 1)[-1].removesuffix(".json"))
        return cls(storage, run_id, max_events, next_id=first + len(items), next_chunk=number + 1)

    def append(self, name: str, data: Any) -> None:
        """Queue an event; it is written (and then sent) by the writer task."""
        if self._closing or (self._truncated and name not in LIFECYCLE):
            return
        if not self._truncated and self._kept >= self.max_events - 1 and name not in TERMINAL:
            self._truncated = True
            self._queued.append(
                ("truncated", {"kept": self.max_events, "note": "only lifecycle events follow"})
            )
            self._kept += 1
            if name not in LIFECYCLE:
                self._wake.set()
                return
        self._queued.append((name, data))
        self._kept += 1
        self._wake.set()

    async def run_writer(self) -> None:
        """Write queued events until ``close`` (run it in a task for the life of the run). A write that
        fails is tried again (the events wait, and so do followers); after ``close``, five failures in a
        row give up, and followers end on the run's record instead."""
        try:
            await self._write_until_closed()
        finally:
            self.closed = True
            changed, self._changed = self._changed, anyio.Event()
            changed.set()  # followers see the end (and read storage for what is there)

    async def _write_until_closed(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            while self._queued:
                batch, self._queued = self._queued, []
                try:
                    await self._write(batch)
                    failures = 0
                except StorageError as exc:
                    self._queued[:0] = batch
                    self.failed, failures = exc, failures + 1
                    log.warning("run_events_not_written", run_id=self.run_id, error=str(exc))
                    if self._closing and failures >= 5:
                        return
                    await anyio.sleep(0.2)
            if self._closing and not self._queued:
                return

    async def _write(self, batch: list[tuple[str, Any]]) -> None:
        while True:
            text = dumps(
                {"first": self._next_id, "events": [[name, data] for name, data in batch]}, lenient=True
            )
            key = _chunk_key(self.run_id, self._next_chunk)
            try:
                await self.storage.write(key, text.encode(), expect=ABSENT)
            except StorageConflictError:
                # Another writer took this chunk number: continue after what it wrote.
                tail = await EventLog.resume(self.storage, self.run_id, self.max_events)
                self._next_id, self._next_chunk = tail._next_id, tail._next_chunk
                continue
            break
        # As a reader from storage sees them (bytes as base64, tuples as lists).
        written = [
            (self._next_id + i, name, data) for i, (name, data) in enumerate(json.loads(text)["events"])
        ]
        self._next_id += len(batch)
        self._next_chunk += 1
        self.events.extend(written)
        self.ended = self.ended or any(name in TERMINAL for _, name, _ in written)
        self.failed = None
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def write_now(self, events: list[tuple[str, Any]]) -> None:
        """Write ``events`` as the next chunk at once (for a run that is not running here: its first
        event when it is queued, its last when it ends without running)."""
        await self._write(events)

    async def close(self) -> None:
        """Stop taking events; returns once the queued ones are written (the writer task then ends)."""
        self._closing = True
        self._wake.set()

    async def follow(self, after: int) -> AsyncIterator[Event]:
        """The written events after id ``after``, then each new one as it is written, up to the terminal
        event. Events before this writer's first are read from storage first."""
        if after + 1 < self.first_local:
            async for event in stored_events(self.storage, self.run_id, after, until=self.first_local - 1):
                after = event[0]
                yield event
        while True:
            for event in self.events[max(0, after + 1 - self.first_local) :]:
                after = event[0]
                yield event
                if event[1] in TERMINAL:
                    return
            if self.ended or self.closed:
                return
            await self._changed.wait()


async def stored_events(
    storage: Storage, run_id: str, after: int, *, until: int | None = None
) -> AsyncIterator[Event]:
    """The events of a log in storage with ids after ``after`` (up to ``until``), in order."""
    keys = await storage.list(_prefix(run_id))
    for start in range(0, len(keys), 16):
        for found in await read_many(storage, keys[start : start + 16]):
            if found is None:
                continue
            first, items = _parse(found[0])
            for offset, (name, data) in enumerate(items):
                event_id = first + offset
                if event_id > after and (until is None or event_id <= until):
                    yield event_id, name, data


async def last_event(storage: Storage, run_id: str) -> Event | None:
    """The last event written to a log (None: it has none)."""
    keys = await storage.list(_prefix(run_id))
    found = await storage.read(keys[-1]) if keys else None
    if found is None:
        return None
    first, items = _parse(found[0])
    name, data = items[-1]
    return first + len(items) - 1, name, data


async def delete_events(storage: Storage, run_ids: list[str]) -> None:
    """Delete the event logs of runs that ended (a deleted session's)."""
    for run_id in run_ids:
        await storage.delete_prefix(_prefix(run_id))


def stream_event(event: Any) -> tuple[str, Any] | None:
    """A runtime stream event as an event name and JSON data (None for events not worth sending)."""
    if isinstance(event, TextChunkEvent):
        return "text", {"text": event.text}
    if isinstance(event, ToolCallEvent):
        return "tool_call", event.tool_use
    if isinstance(event, ToolResultEvent):
        return "tool_result", event.result
    if isinstance(event, MessageEvent):
        return None
    if isinstance(event, NodeStartEvent):
        return "node_start", {"node_id": event.node_id, "execution_count": event.execution_count}
    if isinstance(event, NodeStopEvent):
        return "node_stop", {
            "node_id": event.node_id,
            "status": event.result.status.value,
            "output": event.result.text,
        }
    if isinstance(event, HandoffEvent):
        return "handoff", {"from": event.from_node, "to": event.to_node, "message": event.message}
    if isinstance(event, NodeStreamEvent):
        inner = stream_event(event.event)
        if inner is None:
            return None
        name, data = inner
        return name, {**data, "node_id": event.node_id} if isinstance(data, dict) else data
    return None
