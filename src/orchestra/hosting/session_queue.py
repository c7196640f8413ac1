"""Which run a session is running now, and which wait for it: one small document per busy session.

``busy/<agent_id>/<session_id>.json`` in the workspace's storage holds the run that has the session
(``active``) and the runs waiting for it (``queue``), and is only ever changed by compare-and-swap, so
every server on the storage sees one order. It decides what a message to a running session does
(``on_busy``):

- ``reject``: refused, 409 ``session_busy``;
- ``enqueue``: added to the queue (at most ``runs.max_queue`` wait: 429 ``queue_full`` past that), and
  run when the runs before it have ended (the default);
- ``interrupt``: queued the same way, and the active run is asked to stop (``signals.py``) keeping its
  completed work;
- ``rollback``: queued, and the active run is asked to stop and its turn is discarded.

A queued background run has its run record written first (durably, with everything needed to run it),
so whichever server ends the active run starts the next one (``release`` hands the session over), and a
server that takes over the runs of a server that is gone can too. Turns themselves stay safe without
this document: the session's conditional writes still let only one writer store a turn.

The document is written without fsync (a killed process loses nothing; a power cut may lose a queue,
whose runs a sweep then queues again) and is kept when the session is idle (``active`` null): a later
turn changes it with one compare-and-swap, which the version this server wrote last usually wins. On
local files a change is an append of one line on that condition, not a new file
(``queue_document.py``).
``last`` names the server of the run that had the session before the active one (or last, when idle).

An ``enqueue`` message (``enter``) takes its session in the document before its turn, or takes its place
in the queue and waits in its own process (a *waiter*: no run record); so a message to another server
meanwhile finds it and waits behind it, and the order is the order of arrival, on one server or many,
each turn run once. On one server the session's ``enqueue`` messages claim one at a time, in the order
they came (``in_line``). A waiter is handed the session by ``release``: at once when the run before it
was on its server, else seen in the document within ``runs.poll_s``, which is also how it takes the
session over from a run whose server is gone. When the run before it was on its own server (``last``),
no other server has run the session since, and the session's agent kept there is used. A turn that
found its session idle costs two writes (its claim and its release), without fsync on local files
and appended there.

A plain message with ``reject`` does not write the document: it takes its session on this server only
(``hold_plain``), and across servers the session's conditional writes refuse the second writer, as they
always did (409 ``session_conflict``, nothing of it stored). So that path costs no storage operation. A
message with another policy that finds such a run here writes it into the document first (it is
*promoted*), and the run then hands the session on when it ends, as any run does.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from orchestra._logging import get_logger
from orchestra.errors import StorageConflictError, StorageError
from orchestra.hosting.config import OnBusy
from orchestra.hosting.liveness import Liveness
from orchestra.hosting.outcomes import Refused
from orchestra.hosting.queue_document import Holder, QueueState, Stored, parse, store
from orchestra.storage import Storage

__all__ = ["Busy", "Holder", "PlainRun", "QueueState", "SessionQueues", "Waiter"]

log = get_logger("orchestra.server")

_CACHED = 4096  # versions remembered (one per recently served session)


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


class Busy(Refused):
    """The session runs another run and the policy does not let this one wait (409), or its queue is
    full (429). Sent again after ``retry_after``, it may find the session free."""

    def __init__(self, status: int, code: str, message: str, active: str | None) -> None:
        super().__init__(status, code, message, retry_after=1)
        self.active = active


@dataclass(frozen=True)
class Queued:
    """The run waits: ``position`` runs are ahead of it; ``stop`` is the active run to ask to stop
    (interrupt and rollback)."""

    position: int
    stop: str | None


@dataclass
class PlainRun:
    """A run with ``reject`` that has its session on this server without the document."""

    run_id: str
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # its end, against a promotion in flight
    ended: bool = False
    promoted: bool = False  # written into the document: it hands the session on when it ends


@dataclass
class Waiter:
    """An ``enqueue`` message's run, given its session (``handed``) or queued for it in this process."""

    run_id: str
    handed: anyio.Event = field(default_factory=anyio.Event)
    after_mine: bool = False  # the run before it was this server's (its kept agent is current)


class SessionQueues:
    """The busy documents of one workspace (see the module docstring)."""

    def __init__(self, storage: Storage, liveness: Liveness, max_queue: int) -> None:
        self.storage = storage
        self.liveness = liveness
        self.max_queue = max_queue
        self.local: set[str] = set()  # runs that have a session in this process now, or wait here for it
        self.waiters: dict[str, Waiter] = {}
        self.here: dict[tuple[str, str], str] = {}  # (agent, session) -> the run that has it here
        self.plain: dict[tuple[str, str], PlainRun] = {}
        self._versions: OrderedDict[str, tuple[Stored, QueueState]] = OrderedDict()
        # Weak values: a session's line lives while a message holds it or waits in it.
        self._lines: weakref.WeakValueDictionary[tuple[str, str], anyio.Lock] = weakref.WeakValueDictionary()
        self._waiting: Counter[tuple[str, str]] = Counter()

    def _take(self, agent_id: str, session_id: str, run_id: str) -> None:
        self.local.add(run_id)
        self.here[(agent_id, session_id)] = run_id

    def _drop(self, agent_id: str, session_id: str, run_id: str) -> None:
        self.local.discard(run_id)
        if self.here.get((agent_id, session_id)) == run_id:
            del self.here[(agent_id, session_id)]

    def hold_plain(self, agent_id: str, session_id: str, run_id: str) -> PlainRun:
        """Give the session to a run with ``reject``, on this server only (no storage).

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
        """Wait for the ``enqueue`` messages of the session that came before on this server to claim the
        session or take their place in its queue (anyio's lock serves its waiters in order).

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

    async def read(self, agent_id: str, session_id: str) -> tuple[QueueState, str | None]:
        """The session's state as stored, and the document's version (None: there is none)."""
        state, stored = await self._read(agent_id, session_id)
        return state, stored.version

    async def _read(self, agent_id: str, session_id: str) -> tuple[QueueState, Stored]:
        found = await self.storage.read(self.key(agent_id, session_id))
        if found is None:
            return QueueState(), Stored()
        return parse(*found)

    async def _change(self, agent_id: str, session_id: str, change: Any) -> Any:
        """Apply ``change(state) -> (new state or None to leave it, result)`` by compare-and-swap, starting
        from the document as this server saw it last (``queue_document.py``); returns the result of the
        change that was stored. A decision not to write (or a refusal) is only taken on a state just read."""
        key = self.key(agent_id, session_id)
        cached = self._versions.get(key)
        fresh = cached is None
        if cached is None:
            state, stored = await self._read(agent_id, session_id)
        else:
            stored, state = cached
        while True:
            try:
                new, result = await change(state)
            except Busy:
                if fresh:
                    raise
                new, result = None, None
            if new is None and not fresh:
                state, stored = await self._read(agent_id, session_id)
                fresh = True
                continue
            if new is None:
                return result
            try:
                written = await store(self.storage, key, stored, new)
            except StorageConflictError:
                state, stored = await self._read(agent_id, session_id)
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
        queued, _ = await self._acquire_or_promote(agent_id, session_id, run, on_busy)
        return queued

    async def _acquire_or_promote(
        self, agent_id: str, session_id: str, run: Holder, on_busy: OnBusy
    ) -> tuple[Queued | None, bool]:
        """``acquire``, and whether the run before it was this server's."""
        plain = self.plain.get((agent_id, session_id))
        if plain is None or on_busy == "reject":
            if plain is not None:
                raise _busy(session_id, plain.run_id)
            return await self._acquire(agent_id, session_id, run, on_busy, None)
        async with plain.lock:  # its end waits for this: it then knows whether it was promoted
            running = None if plain.ended else Holder(plain.run_id, self.liveness.server_id)
            return await self._acquire(agent_id, session_id, run, on_busy, running, plain)

    async def enter(self, agent_id: str, session_id: str, run_id: str) -> Waiter:
        """An ``enqueue`` message's run takes its session (one compare-and-swap) or its place in the queue
        (a plain run here is promoted first, as for ``acquire``); ``wait_turn`` then waits for its turn.

        Raises:
            Busy: its queue is full (429 ``queue_full``).
        """
        waiter = self.waiters[run_id] = Waiter(run_id)
        try:
            queued, after_mine = await self._acquire_or_promote(
                agent_id, session_id, Holder(run_id, self.liveness.server_id), "enqueue"
            )
        except BaseException:
            del self.waiters[run_id]
            raise
        if queued is None:
            self._hand(waiter, after_mine)
        else:
            self.local.add(run_id)  # a live holder: waiting here
        return waiter

    async def wait_turn(self, agent_id: str, session_id: str, waiter: Waiter, every_s: float) -> bool:
        """Wait until ``waiter`` has its session: handed over here, else read in the document every
        ``every_s`` (handed over by another server, or the run before it is gone with its server). Returns
        whether the run before it was this server's. Cancelled, it leaves the queue (if it was handed
        the session meanwhile, the caller releases it).
        """
        me = self.liveness.server_id
        run_id = waiter.run_id

        async def change(state: QueueState) -> tuple[QueueState | None, bool | None]:
            if state.active is not None and state.active.run_id == run_id:
                return None, state.last == me  # another server handed it over
            queue = state.queue
            if run_id not in {h.run_id for h in queue}:  # the document was lost or deleted: in again
                queue = [*queue, Holder(run_id, me)]
            if state.active is None or await self._stale(state.active):
                place = [h.run_id for h in queue].index(run_id)
                if await self._gone_waiters(queue[:place]):  # no live run is ahead of it
                    new = state.handed(Holder(run_id, me), queue[place + 1 :])
                    return new, new.last == me
            return (None if queue is state.queue else QueueState(state.active, queue, state.last)), None

        try:
            while not waiter.handed.is_set():
                with anyio.move_on_after(every_s):
                    await waiter.handed.wait()
                if not waiter.handed.is_set():
                    try:
                        after_mine = await self._change(agent_id, session_id, change)
                    except StorageError as exc:  # it waits on; the next read tries again
                        log.warning(
                            "session_queue_not_read", session_id=session_id, run_id=run_id, error=str(exc)
                        )
                        continue
                    if after_mine is not None:
                        self._take(agent_id, session_id, run_id)
                        self._hand(waiter, after_mine)
        except BaseException:
            self.waiters.pop(run_id, None)
            if not waiter.handed.is_set():  # (handed meanwhile: the caller hands the session on)
                self.local.discard(run_id)
                with anyio.CancelScope(shield=True), contextlib.suppress(StorageError):
                    await self.remove(agent_id, session_id, run_id)  # else passed over when it is first
            raise
        self.waiters.pop(run_id, None)
        return waiter.after_mine

    async def _gone_waiters(self, holders: list[Holder]) -> bool:
        """Whether each of ``holders`` is a waiter that waits no more (its server is gone, or it left)."""
        for holder in holders:
            if holder.background or not await self._stale(holder):
                return False
        return True

    def _hand(self, waiter: Waiter, after_mine: bool) -> None:
        waiter.after_mine = after_mine
        waiter.handed.set()

    async def _acquire(
        self,
        agent_id: str,
        session_id: str,
        run: Holder,
        on_busy: OnBusy,
        running: Holder | None,
        plain: PlainRun | None = None,
    ) -> tuple[Queued | None, bool]:
        after_mine = False

        async def change(state: QueueState) -> tuple[QueueState | None, Queued | None]:
            nonlocal after_mine
            if any(h.run_id == run.run_id for h in state.queue):
                return None, Queued(1 + [h.run_id for h in state.queue].index(run.run_id), None)
            if state.active is not None and state.active.run_id == run.run_id:
                return QueueState(run, state.queue, state.last), None
            active = state.active or running  # a plain run here is promoted into the document
            if active is None or (not state.queue and active is state.active and await self._stale(active)):
                new = state.handed(run, state.queue)
                after_mine = new.last == self.liveness.server_id
                return new, None
            if on_busy == "reject":
                raise _busy(session_id, active.run_id)
            if len(state.queue) >= self.max_queue:
                raise _full(session_id, len(state.queue), active.run_id)
            stop = active.run_id if on_busy in ("interrupt", "rollback") else None
            return QueueState(active, [*state.queue, run], state.last), Queued(len(state.queue) + 1, stop)

        queued: Queued | None = await self._change(agent_id, session_id, change)
        if queued is None:
            self._take(agent_id, session_id, run.run_id)
        elif plain is not None and running is not None:
            written = self._versions.get(self.key(agent_id, session_id))
            plain.promoted = written is not None and written[1].active == running
        return queued, after_mine

    async def release(
        self, agent_id: str, session_id: str, run_id: str, *, for_gone: bool = False
    ) -> Holder | None:
        """``run_id`` has ended: hand the session to the first queued run and return it when it is a
        background run, now this server's to start (a waiter here is woken; a waiter of another server
        reads it in the document), or leave it idle (None). Only this server's hold is released, unless
        ``for_gone`` (a sweep ends the run of a server that is gone)."""
        self._drop(agent_id, session_id, run_id)
        me = self.liveness.server_id

        async def change(state: QueueState) -> tuple[QueueState | None, Holder | None]:
            if (
                state.active is None
                or state.active.run_id != run_id
                or not (for_gone or state.active.server == me)
            ):
                return None, None  # not ours any more (taken over, or released already)
            # A waiter of this process that has left (its request was cancelled) is passed over.
            queue = [h for h in state.queue if h.background or h.server != me or h.run_id in self.waiters]
            if not queue:
                return state.handed(None, []), None
            head = queue[0] if not queue[0].background else Holder(queue[0].run_id, me, True)
            return state.handed(head, queue[1:]), head

        head: Holder | None = await self._change(agent_id, session_id, change)
        started = self._handed_here(agent_id, session_id, head, after_mine=not for_gone)
        return None if started is None else head

    def _handed_here(
        self, agent_id: str, session_id: str, head: Holder | None, *, after_mine: bool
    ) -> str | None:
        """The session was handed to ``head``: a background run of this server's to start (its id is
        returned), a waiter here (woken), or a waiter of another server (it reads the document)."""
        if head is None or head.server != self.liveness.server_id:
            return None
        self._take(agent_id, session_id, head.run_id)
        waiter = self.waiters.get(head.run_id)
        if waiter is not None and not head.background:
            self._hand(waiter, after_mine)
            return None
        return head.run_id

    async def recover(self, agent_id: str, session_id: str, run_id: str, *, lost: bool) -> str | None:
        """For a sweep that found ``run_id`` queued, or unfinished and its server gone: the run this
        server must start now for the session (the active run revived, or the next background run in
        the queue when the active one was a turn that died with its server), or None. A run the document
        does not know is queued again only when ``lost`` (the server that queued it is gone: a power cut
        lost the document); a live server's run is on its way into the document. A waiter at the head of
        the queue is handed the session (woken here, or it reads the document); one that waits no more
        is passed over."""
        me = self.liveness.server_id

        async def change(state: QueueState) -> tuple[QueueState | None, Holder | None]:
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
                    return (QueueState(active, queue, state.last) if queue is not state.queue else None), None
                if active.background:
                    revived = Holder(active.run_id, me, True)
                    return state.handed(revived, queue), revived
            while queue and not queue[0].background and await self._stale(queue[0]):
                queue = queue[1:]
            if not queue:
                return state.handed(None, []), None
            head = queue[0] if not queue[0].background else Holder(queue[0].run_id, me, True)
            return state.handed(head, queue[1:]), head

        head: Holder | None = await self._change(agent_id, session_id, change)
        return self._handed_here(agent_id, session_id, head, after_mine=False)

    async def remove(self, agent_id: str, session_id: str, run_id: str) -> bool:
        """Take a queued run out of the queue (it was cancelled before it started); False if it is not
        queued (it has started, or was never queued)."""

        async def change(state: QueueState) -> tuple[QueueState | None, bool]:
            queue = [h for h in state.queue if h.run_id != run_id]
            if len(queue) == len(state.queue):
                return None, False
            return QueueState(state.active, queue, state.last), True

        removed: bool = await self._change(agent_id, session_id, change)
        return removed

    async def forget(self, agent_id: str, session_id: str) -> None:
        """The session was deleted: its document goes too."""
        self._versions.pop(self.key(agent_id, session_id), None)
        await self.storage.delete(self.key(agent_id, session_id))
