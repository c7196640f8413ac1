"""Asking a run to stop, from any server: cancel, interrupt (keep its completed work) or rollback.

A stop request is ``signals/<run_id>.json`` in the workspace's storage, created once (the first request
decides how the run stops; later ones are answered with it). The server that runs the run looks for it
every ``runs.poll_s`` while the run executes (``Stops.watch``, one read of every running run's key at a
time); a request made on that same server stops the run at once. A run stops only before its outcome is
decided: one that finished first keeps its outcome, and a late request is ignored.

What stopping does is decided by the runtime (``runtime.py``), by mode:

| mode | an agent's turn | a pipeline's run |
| --- | --- | --- |
| ``cancel`` | rolled back, as after any failure | saved ``interrupted`` (completed nodes kept); resumable |
| ``interrupt`` | its completed steps kept, closed with a note | saved ``interrupted``; the next message starts a new run |
| ``rollback`` | discarded | discarded: the session is put back as it was before the run |
"""

from __future__ import annotations

import contextlib
import json
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from orchestra._logging import get_logger
from orchestra.errors import StorageConflictError, StorageError
from orchestra.storage import ABSENT, Storage, read_many

__all__ = ["Stop", "StopMode", "StopRequest", "Stops"]

log = get_logger("orchestra.server")

StopMode = Literal["cancel", "interrupt", "rollback"]


@dataclass(frozen=True)
class StopRequest:
    mode: StopMode
    by: str | None = None  # the run that asked (interrupt, rollback), None for a cancel
    at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"by": self.mode, "run_id": self.by, "at": self.at}


@dataclass
class Stop:
    """A running run that can be stopped: what stopping it asked for, and its cancel scope."""

    run_id: str
    storage: Storage
    started: float = field(default_factory=time.monotonic)
    request: StopRequest | None = None
    decided: bool = False  # the outcome is being recorded: too late to stop
    partial: list[Any] = field(default_factory=list)  # an agent's turn so far, when the stop came
    _history: list[Any] | None = None
    _before = 0
    _scope: anyio.CancelScope | None = None

    def watch(self, history: list[Any]) -> None:
        """An agent's history: when a stop comes, the messages added since now are kept in ``partial``
        (the cancellation then rolls the turn back)."""
        self._history, self._before = history, len(history)

    stoppable: bool = True  # a plain invoke without a session is not: it stops when its client goes

    def scope(self) -> AbstractContextManager[Any]:
        """A new cancel scope to run the run in (cancelled at once if a stop came first)."""
        if not self.stoppable:
            return contextlib.nullcontext()
        self._scope = anyio.CancelScope()
        if self.request is not None:
            self._scope.cancel()
        return self._scope

    def trigger(self, request: StopRequest) -> None:
        if self.decided or self.request is not None:
            return
        self.request = request
        if self._history is not None:
            self.partial = list(self._history[self._before :])
        if self._scope is not None:
            self._scope.cancel()


class Stops:
    """The stop requests of every workspace, and the runs this server can stop (see the docstring)."""

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self.running: dict[str, Stop] = {}

    @staticmethod
    def key(run_id: str) -> str:
        return f"signals/{run_id}.json"

    def register(self, run_id: str, storage: Storage, *, stoppable: bool = True) -> Stop:
        """A run that starts here; one that is not ``stoppable`` is not watched (nothing can stop it)."""
        stop = Stop(run_id, storage, stoppable=stoppable)
        if stoppable:
            self.running[run_id] = stop
        return stop

    def unregister(self, stop: Stop) -> None:
        stop.decided = True
        if self.running.get(stop.run_id) is stop:
            del self.running[stop.run_id]

    async def request(self, storage: Storage, run_id: str, request: StopRequest) -> StopRequest:
        """Ask ``run_id`` to stop (the first request wins); returns the request that holds."""
        data = json.dumps({"mode": request.mode, "by": request.by, "at": request.at or time.time()})
        try:
            await storage.write(self.key(run_id), data.encode(), expect=ABSENT)
            held = request
        except StorageConflictError:
            held = await self.read(storage, run_id) or request
        running = self.running.get(run_id)
        if running is not None:
            running.trigger(held)
        return held

    async def read(self, storage: Storage, run_id: str) -> StopRequest | None:
        found = await storage.read(self.key(run_id))
        return None if found is None else _parse(found[0])

    async def clear(self, storage: Storage, run_id: str) -> None:
        """The run ended: its request, if any, goes (logged if that fails: a sweep clears it later)."""
        try:
            await storage.delete(self.key(run_id))
        except StorageError as exc:
            log.warning("stop_request_not_deleted", run_id=run_id, error=str(exc))

    async def watch(self) -> None:
        """Look for requests made on other servers for the runs this server runs, every ``poll_s`` (a run
        younger than that is looked at the next time: most runs end before, and cost no read)."""
        while True:
            await anyio.sleep(self.poll_s)
            by_storage: dict[int, tuple[Storage, list[Stop]]] = {}
            old_enough = time.monotonic() - self.poll_s
            for stop in list(self.running.values()):
                if stop.started <= old_enough:
                    by_storage.setdefault(id(stop.storage), (stop.storage, []))[1].append(stop)
            for storage, stops in by_storage.values():
                try:
                    found = await read_many(storage, [self.key(s.run_id) for s in stops])
                except StorageError as exc:
                    log.warning("stop_requests_not_read", error=str(exc))
                    continue
                for stop, item in zip(stops, found, strict=True):
                    if item is not None:
                        stop.trigger(_parse(item[0]))


def _parse(data: bytes) -> StopRequest:
    raw = json.loads(data)
    return StopRequest(raw["mode"], raw.get("by"), float(raw.get("at") or 0.0))
