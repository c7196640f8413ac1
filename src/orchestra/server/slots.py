"""Which run a session is running now, and which wait for it: one small document per busy session.

``busy/<agent_id>/<session_id>.json`` in the workspace's storage holds the run that has the session
(``active``) and the runs waiting for it (``queue``), and is only ever changed by compare-and-swap, so
every server on the storage sees one order. It decides what a message to a running session does
(``on_busy``):

- ``reject``: refused, 409 ``session_busy`` (the default);
- ``enqueue``: added to the queue (at most ``runs.max_queue`` wait: 429 ``queue_full`` past that), and
  run when the runs before it have ended;
- ``interrupt``: queued the same way, and the active run is asked to stop (``signals.py``) keeping its
  completed work;
- ``rollback``: queued, and the active run is asked to stop and its turn is discarded.

A queued run always has its run record written first (durably, with everything needed to run it), so
whichever server ends the active run starts the next one (``release`` hands the session over), and a
server that takes over the runs of a server that is gone can too. Turns themselves stay safe without
this document: the session's conditional writes still let only one writer store a turn.

The document is written without fsync (a killed process loses nothing; a power cut may lose a queue,
whose runs a sweep then queues again) and is kept when the session is idle (``active`` null): a later
turn changes it with one compare-and-swap, which the version this server saw last usually wins.

A plain message with the default policy (``reject``) does not write the document: it takes its session
on this server only (``hold_plain``), and across servers the session's conditional writes refuse the
second writer, as they always did (409 ``session_conflict``, nothing of it stored). So the default path
costs no storage operation. A message with another policy that finds such a run here writes it into the
document first (it is *promoted*), and the run then hands the session on when it ends, as any run does.

A plain message with ``enqueue`` takes the same path while its session stays on one server: it waits
behind the ``enqueue`` messages that came before it on this server (``in_line``, first come first
served), then holds its session as a plain run. Only when the session is held here by a run the
document orders, or when the turn lost its session to another server's writer (it stored nothing), is
it queued in the document; the session is then *contended* for a while, and its ``enqueue`` messages go
to the document at once.
"""

from __future__ import annotations

import json
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from orchestra.errors import StorageConflictError
from orchestra.server.config import OnBusy
from orchestra.server.liveness import Liveness
from orchestra.storage import ABSENT, Storage

__all__ = ["Busy", "Holder", "PlainRun", "SessionSlots", "SlotState"]

_CACHED = 4096  # versions remembered (one per recently served session)
# How long a session that another server wrote meanwhile takes its enqueue messages by the document.
CONTENDED_S = 30.0


@dataclass(frozen=True)
class Holder:
    """A run that has a session or waits for it, and the server responsible for it."""

    run_id: str
    server: str
    background: bool = False  # its record can be run by any server (every queued run's can)


@dataclass
class SlotState:
    active: Holder | None = None
    queue: list[Holder] = field(default_factory=list)

    def to_json(self) -> bytes:
        def plain(holder: Holder) -> dict[str, Any]:
            return {"run_id": holder.run_id, "server": holder.server, "background": holder.background}

        return json.dumps(
            {"active": plain(self.active) if self.active else None, "queue": [plain(h) for h in self.queue]}
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SlotState:
        raw = json.loads(data)
        active = raw.get("active")
        return cls(Holder(**active) if active else None, [Holder(**item) for item in raw.get("queue", [])])


def _busy(session_id: str, active: str) -> Busy:
    return Busy(
        409,
        "session_busy",
        f"session {session_id!r} is running another run ({active}); send this message when it ends, or "
        "with on_busy enqueue, interrupt or rollback",
        active,
    )


def _full(session_id: str, waiting: int, active: str | None) -> Busy:
    return Busy(
        429,
        "queue_full",
        f"session {session_id!r} already has {waiting} runs waiting (runs.max_queue); send this message later",
        active,
    )


class Busy(Exception):
    """The session runs another run and the policy does not let this one wait (409), or its queue is
    full (429)."""

    def __init__(self, status: int, code: str, message: str, active: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.active = active


@dataclass(frozen=True)
class Queued:
    """The run waits: ``position`` runs are ahead of it; ``stop`` is the active run to ask to stop
    (interrupt and rollback)."""

    position: int
    stop: str | None


@dataclass
class PlainRun:
    """A run with the default policy that has its session on this server without the document."""

    run_id: str
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # its end, against a promotion in flight
    ended: bool = False
    promoted: bool = False  # written into the document: it hands the session on when it ends


class SessionSlots:
    """The busy documents of one workspace (see the module docstring)."""

    def __init__(self, storage: Storage, liveness: Liveness, max_queue: int) -> None:
        self.storage = storage
        self.liveness = liveness
        self.max_queue = max_queue
        self.local: set[str] = set()  # runs that have a session in this process now
        self.here: dict[tuple[str, str], str] = {}  # (agent, session) -> the run that has it here
        self.plain: dict[tuple[str, str], PlainRun] = {}
        self._versions: OrderedDict[str, tuple[str, SlotState]] = OrderedDict()
        # Weak values: a session's line lives while a message holds it or waits in it.
        self._lines: weakref.WeakValueDictionary[tuple[str, str], anyio.Lock] = weakref.WeakValueDictionary()
        self._waiting: Counter[tuple[str, str]] = Counter()
        self._contended: OrderedDict[tuple[str, str], float] = OrderedDict()  # -> when it stops being

    def _take(self, agent_id: str, session_id: str, run_id: str) -> None:
        self.local.add(run_id)
        self.here[(agent_id, session_id)] = run_id

    def _drop(self, agent_id: str, session_id: str, run_id: str) -> None:
        self.local.discard(run_id)
        if self.here.get((agent_id, session_id)) == run_id:
            del self.here[(agent_id, session_id)]

    def hold_plain(self, agent_id: str, session_id: str, run_id: str) -> PlainRun:
        """Give the session to a run with the default policy, on this server only (no storage).

        Raises:
            Busy: another run has the session on this server (409 ``session_busy``).
        """
        active = self.here.get((agent_id, session_id))
        if active is not None:
            raise _busy(session_id, active)
        plain = self.plain[(agent_id, session_id)] = PlainRun(run_id)
        self._take(agent_id, session_id, run_id)
        return plain

    @asynccontextmanager
    async def in_line(self, agent_id: str, session_id: str) -> AsyncIterator[None]:
        """Wait for the ``enqueue`` messages of the session that came before on this server (anyio's lock
        serves its waiters in order).

        Raises:
            Busy: ``runs.max_queue`` messages already wait here (429 ``queue_full``).
        """
        key = (agent_id, session_id)
        if self._waiting[key] >= self.max_queue:
            raise _full(session_id, self._waiting[key], self.here.get(key))
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = anyio.Lock()
        self._waiting[key] += 1
        waiting = True
        try:
            async with line:
                self._leave_line(key)
                waiting = False
                yield
        finally:
            if waiting:  # cancelled while it waited
                self._leave_line(key)

    def _leave_line(self, key: tuple[str, str]) -> None:
        self._waiting[key] -= 1
        if not self._waiting[key]:
            del self._waiting[key]

    def contended(self, agent_id: str, session_id: str) -> bool:
        """Whether the session was written by another server lately (``contend``), or its document, as
        this server last saw it, names a run: its ``enqueue`` messages then go to the document."""
        until = self._contended.get((agent_id, session_id))
        if until is not None:
            if until > time.monotonic():
                return True
            del self._contended[(agent_id, session_id)]
        seen = self._versions.get(self.key(agent_id, session_id))
        return seen is not None and (seen[1].active is not None or bool(seen[1].queue))

    def contend(self, agent_id: str, session_id: str) -> None:
        """A plain turn lost the session to another server's writer."""
        self._contended[(agent_id, session_id)] = time.monotonic() + CONTENDED_S
        self._contended.move_to_end((agent_id, session_id))
        while len(self._contended) > _CACHED:
            self._contended.popitem(last=False)

    async def end_plain(self, agent_id: str, session_id: str, plain: PlainRun) -> bool:
        """The plain run ended; whether it was promoted (then the caller hands the session on with
        ``release``, as any run of the document does)."""
        async with plain.lock:
            plain.ended = True
        if self.plain.get((agent_id, session_id)) is plain:
            del self.plain[(agent_id, session_id)]
        self._drop(agent_id, session_id, plain.run_id)
        return plain.promoted

    @staticmethod
    def key(agent_id: str, session_id: str) -> str:
        return f"busy/{agent_id}/{session_id}.json"

    async def read(self, agent_id: str, session_id: str) -> tuple[SlotState, str | None]:
        found = await self.storage.read(self.key(agent_id, session_id))
        if found is None:
            return SlotState(), None
        return SlotState.from_json(found[0]), found[1]

    async def _change(self, agent_id: str, session_id: str, change: Any) -> Any:
        """Apply ``change(state) -> (new state or None to leave it, result)`` by compare-and-swap, starting
        from the version this server saw last; returns the result of the change that was written. A
        decision not to write (or a refusal) is only taken on a state just read."""
        key = self.key(agent_id, session_id)
        cached = self._versions.get(key)
        fresh = cached is None
        state, version = (cached[1], cached[0]) if cached else await self.read(agent_id, session_id)
        while True:
            try:
                new, result = await change(state)
            except Busy:
                if fresh:
                    raise
                new, result = None, None
            if new is None and not fresh:
                state, version = await self.read(agent_id, session_id)
                fresh = True
                continue
            if new is None:
                return result
            try:
                written = await self.storage.write(
                    key, new.to_json(), expect=ABSENT if version is None else version
                )
            except StorageConflictError:
                state, version = await self.read(agent_id, session_id)
                fresh = True
                continue
            self._versions[key] = (written, new)
            self._versions.move_to_end(key)
            while len(self._versions) > _CACHED:
                self._versions.popitem(last=False)
            return result

    async def _stale(self, holder: Holder) -> bool:
        """Whether ``holder`` no longer runs: its server is gone (a background run's is taken over by
        a sweep instead), or it was this process's and ended."""
        if holder.server == self.liveness.server_id:
            return holder.run_id not in self.local
        return not holder.background and not await self.liveness.is_alive(holder.server)

    async def acquire(self, agent_id: str, session_id: str, run: Holder, on_busy: OnBusy) -> Queued | None:
        """Give the session to ``run`` (None), or queue it by the policy (``Queued``).

        Raises:
            Busy: the policy is ``reject`` (409 ``session_busy``) or the queue is full (429 ``queue_full``).
        """
        plain = self.plain.get((agent_id, session_id))
        if plain is None or on_busy == "reject":
            if plain is not None:
                raise _busy(session_id, plain.run_id)
            return await self._acquire(agent_id, session_id, run, on_busy, None)
        async with plain.lock:  # its end waits for this: it then knows whether it was promoted
            running = None if plain.ended else Holder(plain.run_id, self.liveness.server_id)
            return await self._acquire(agent_id, session_id, run, on_busy, running, plain)

    async def _acquire(
        self,
        agent_id: str,
        session_id: str,
        run: Holder,
        on_busy: OnBusy,
        running: Holder | None,
        plain: PlainRun | None = None,
    ) -> Queued | None:
        async def change(state: SlotState) -> tuple[SlotState | None, Queued | None]:
            if any(h.run_id == run.run_id for h in state.queue):
                return None, Queued(1 + [h.run_id for h in state.queue].index(run.run_id), None)
            if state.active is not None and state.active.run_id == run.run_id:
                return SlotState(run, state.queue), None
            active = state.active or running  # a plain run here is promoted into the document
            if active is None or (not state.queue and active is state.active and await self._stale(active)):
                return SlotState(run, state.queue), None
            if on_busy == "reject":
                raise _busy(session_id, active.run_id)
            if len(state.queue) >= self.max_queue:
                raise _full(session_id, len(state.queue), active.run_id)
            stop = active.run_id if on_busy in ("interrupt", "rollback") else None
            return SlotState(active, [*state.queue, run]), Queued(len(state.queue) + 1, stop)

        queued: Queued | None = await self._change(agent_id, session_id, change)
        if queued is None:
            self._take(agent_id, session_id, run.run_id)
        elif plain is not None and running is not None:
            written = self._versions.get(self.key(agent_id, session_id))
            plain.promoted = written is not None and written[1].active == running
        return queued

    async def release(
        self, agent_id: str, session_id: str, run_id: str, *, for_gone: bool = False
    ) -> Holder | None:
        """``run_id`` has ended: hand the session to the first queued run, now this server's to start
        (returned), or leave it idle (None). Only this server's hold is released, unless ``for_gone``
        (a sweep ends the run of a server that is gone)."""
        self._drop(agent_id, session_id, run_id)
        me = self.liveness.server_id

        async def change(state: SlotState) -> tuple[SlotState | None, Holder | None]:
            if (
                state.active is None
                or state.active.run_id != run_id
                or not (for_gone or state.active.server == me)
            ):
                return None, None  # not ours any more (taken over, or released already)
            if not state.queue:
                return SlotState(None, []), None
            head = Holder(state.queue[0].run_id, me, True)
            return SlotState(head, state.queue[1:]), head

        head: Holder | None = await self._change(agent_id, session_id, change)
        if head is not None:
            self._take(agent_id, session_id, head.run_id)
        return head

    async def recover(self, agent_id: str, session_id: str, run_id: str, *, lost: bool) -> str | None:
        """For a sweep that found ``run_id`` queued, or unfinished and its server gone: the run this
        server must start now for the session (the active run revived, or the next in the queue when the
        active one was a turn that died with its server), or None. A run the document does not know is
        queued again only when ``lost`` (the server that queued it is gone: a power cut lost the
        document); a live server's run is on its way into the document."""
        me = self.liveness.server_id

        async def change(state: SlotState) -> tuple[SlotState | None, str | None]:
            known = {h.run_id for h in state.queue} | ({state.active.run_id} if state.active else set())
            if run_id not in known and not lost:
                return None, None
            queue = state.queue if run_id in known else [*state.queue, Holder(run_id, me, True)]
            active = state.active
            if active is not None:
                gone = (
                    active.run_id not in self.local
                    if active.server == me
                    else not await self.liveness.is_alive(active.server)
                )
                if not gone:
                    return (SlotState(active, queue) if queue is not state.queue else None), None
                if active.background:
                    return SlotState(Holder(active.run_id, me, True), queue), active.run_id
            if not queue:
                return SlotState(None, []), None
            return SlotState(Holder(queue[0].run_id, me, True), queue[1:]), queue[0].run_id

        start: str | None = await self._change(agent_id, session_id, change)
        if start is not None:
            self._take(agent_id, session_id, start)
        return start

    async def remove(self, agent_id: str, session_id: str, run_id: str) -> bool:
        """Take a queued run out of the queue (it was cancelled before it started); False if it is not
        queued (it has started, or was never queued)."""

        async def change(state: SlotState) -> tuple[SlotState | None, bool]:
            queue = [h for h in state.queue if h.run_id != run_id]
            if len(queue) == len(state.queue):
                return None, False
            return SlotState(state.active, queue), True

        removed: bool = await self._change(agent_id, session_id, change)
        return removed

    async def forget(self, agent_id: str, session_id: str) -> None:
        """The session was deleted: its document goes too."""
        self._versions.pop(self.key(agent_id, session_id), None)
        await self.storage.delete(self.key(agent_id, session_id))
