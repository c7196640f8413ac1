"""Group commit: the changes that arrive while a commit runs share the next one.

Every durable storage pays for a commit (a transaction's fsync, a round trip to a database) rather than
for each change, so concurrent writers - the turns of different sessions on one server, the parallel
nodes of one run, the run records beside them - share commits:

- A caller hands its changes (``Write``, ``Delete``, ``DeletePrefix``) to ``GroupCommit.run`` (blocking; a
  storage calls it from a worker thread) and waits. If no commit is running, it leads: it takes every
  change queued so far, its own included, and commits them as one batch through the storage's
  ``Committer``. Changes that arrive meanwhile queue; when the commit ends, one of their callers leads
  the next batch. No thread waits on a timer: a writer alone commits at once.
- A caller is answered only when its batch's commit returned: its change is then durable, or written when
  the storage is configured for less (``synchronous=NORMAL`` on SQLite, ``durable=False`` on PostgreSQL).
  A committer settles each change inside the transaction, but a change is *done* (its caller may be
  told) only once the commit is over, for the whole batch at once: a waiting caller woken meanwhile goes
  back to waiting, and a COMMIT that fails after its statements ran tells every caller so.
- Within a batch the changes are applied in arrival order, and each keeps its own condition: a ``Write``
  with ``expect=ABSENT`` or a version that does not hold fails that write alone
  (``StorageConflictError``), never the batch. A caller's changes stay together, in one batch.
- A commit that failed before it was made (``stored=False`` on the error it raised) fails the batch's
  changes with that error; a passing outage (``StorageUnavailableError``) is tried again first, a few
  times. A commit whose answer was lost (a connection that dropped during COMMIT, an I/O error while
  committing: the error says ``stored=None``) is resolved by reading back before anyone is told:
  ``Committer.applied`` says which changes are in storage (a write's version is a token made for it, so
  a value is never taken for somebody else's). Those are done. The others were not made: after a lost
  connection they are tried again as new changes (a conditional write is checked again, exactly as on
  its first try); after any other error (a full disk) they fail with it, ``stored=False``. If reading
  back fails too, each unresolved change gets ``StorageOutcomeUnknownError`` (``stored=None``), naming
  its key.

A storage whose changes are made by each caller in its own thread (local files: write and rename, in
parallel) can group only what makes them durable: its callers submit ``Sync`` once their change is in
place, and one folder fsync answers every caller whose change was in place before it started.

``commit_many`` is the same for callers above the storage: several changes, each with its own outcome,
in one commit where the storage groups commits (SQLite, PostgreSQL) and concurrently elsewhere.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from orchestra.errors import StorageError, StorageOutcomeUnknownError, StorageUnavailableError
from orchestra.storage._base import Expect, Storage, validate_key, validate_prefix

__all__ = [
    "Change",
    "Committer",
    "Delete",
    "DeletePrefix",
    "GroupCommit",
    "Outcome",
    "Pending",
    "Sync",
    "Write",
    "commit_many",
    "new_version",
]


@dataclass(frozen=True, slots=True)
class Write:
    """Store ``data`` under ``key`` (on the condition ``expect``, as ``Storage.write``)."""

    key: str
    data: bytes
    expect: Expect = None


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove ``key`` (not an error if it does not exist)."""

    key: str


@dataclass(frozen=True, slots=True)
class DeletePrefix:
    """Remove every key that starts with ``prefix``; its outcome is how many were removed."""

    prefix: str


@dataclass(frozen=True, slots=True)
class Sync:
    """Make durable a change its caller already made under ``key`` (local files: the new name, in the
    folder open as ``folder_fd``, which stays open while the caller waits). Its outcome is None."""

    key: str
    folder_fd: int


Change: TypeAlias = Write | Delete | DeletePrefix | Sync
Outcome: TypeAlias = str | int | StorageError | None
"""A change's outcome: a write's new version, a prefix deletion's count, None for a delete, or the
``StorageError`` that change failed with."""


def new_version() -> str:
    """A fresh version for one write: unique, so reading back can tell our write from anybody else's."""
    return secrets.token_hex(10)


@dataclass(eq=False, slots=True)
class Pending:
    """One change on its way through a batch, with the version it will have (writes) and its outcome.

    ``settled`` says its outcome is decided (a committer settles each change as its statement runs,
    inside the transaction); ``done`` says its caller may be told: only ``GroupCommit`` sets it, once the
    batch's commit is over (committed, failed, or settled by reading back). A change settled inside a
    transaction whose COMMIT then fails is not done: it is settled again, as failed."""

    change: Change
    version: str = field(default_factory=new_version)
    settled: bool = False
    done: bool = False
    result: str | int | None = None
    error: StorageError | None = None

    @property
    def key(self) -> str:
        return self.change.prefix if isinstance(self.change, DeletePrefix) else self.change.key

    def succeed(self, result: str | int | None) -> None:
        self.result, self.error, self.settled = result, None, True

    def fail(self, error: StorageError) -> None:
        self.result, self.error, self.settled = None, error, True

    def unsettle(self) -> None:
        """Forget what a commit that failed said about this change."""
        self.result, self.error, self.settled = None, None, False

    def outcome(self) -> Outcome:
        return self.error if self.error is not None else self.result


class Committer(Protocol):
    """What a storage gives ``GroupCommit``: how to commit a batch and how to read one back."""

    def commit(self, batch: Sequence[Pending]) -> None:
        """Apply every change of ``batch``, in order, in one commit (one transaction).

        An error it raises says what went wrong with the commit (its reason, and what to do); the group
        commit prefixes the storage and the change for each caller.

        Settle each change that was decided (``Pending.succeed`` with the write's ``Pending.version``, a
        delete's None, a prefix's count; ``Pending.fail`` with a ``StorageConflictError`` for a condition
        that did not hold), before or after the commit itself: settling tells no caller anything, the
        group commit answers the batch's callers once ``commit`` has returned or raised. Raise a
        ``StorageError`` if the commit as a whole failed: ``stored=False`` when it is known that nothing
        was committed, ``stored=None`` when the answer was lost.
        """
        ...

    def applied(self, batch: Sequence[Pending]) -> list[bool]:
        """Reading back after a lost answer: for each change, whether storage holds it now (a write: the
        key is at its version; a delete: the key is gone). Raises a ``StorageError`` if it cannot tell."""
        ...


class GroupCommit:
    """Commits the changes of concurrent callers in shared batches (see the module docstring).

    Args:
        committer: the storage's side: commit a batch, read one back.
        where: names the storage in errors (``sqlite:/data/app.db``).
        max_changes: a batch takes whole callers' changes until it holds this many (a caller's own
            changes are never split, so one big ``write_many`` may make a bigger batch).
        attempts: commits tried per batch while the storage is unavailable, or a lost answer left
            changes not made.
        backoff: seconds before the second attempt; doubled for each later one.
    """

    def __init__(
        self,
        committer: Committer,
        *,
        where: str,
        max_changes: int = 1000,
        attempts: int = 3,
        backoff: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.committer = committer
        self.where = where
        self.max_changes = max_changes
        self.attempts = attempts
        self.backoff = backoff
        self._sleep = sleep
        self._cond = threading.Condition()
        self._queue: deque[list[Pending]] = deque()
        self._leading = False
        self.commits = 0  # how many batches were committed, and how many changes they held (benchmarks)
        self.changes = 0

    def run(self, changes: Sequence[Change]) -> list[Pending]:
        """Commit ``changes`` (with whatever else is queued) and return them settled. Blocks."""
        mine = [Pending(change) for change in changes]
        if not mine:
            return mine
        with self._cond:
            self._queue.append(mine)
            while not mine[-1].done:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                batch = self._take()
                self._cond.release()
                try:
                    self._commit(batch)
                except BaseException as exc:  # a bug or an interrupt: nobody may wait for this batch forever
                    for pending in batch:
                        if not pending.settled:
                            pending.fail(
                                self._error_for(pending, StorageOutcomeUnknownError(repr(exc)), stored=None)
                            )
                    raise
                finally:
                    self._cond.acquire()
                    # Only now, with the commit over: a follower woken meanwhile (by an earlier batch's
                    # notify) must not take a change settled inside the transaction for a committed one.
                    for pending in batch:
                        pending.done = True
                    self._leading = False
                    self._cond.notify_all()
        return mine

    def _take(self) -> list[Pending]:
        """The next batch: whole callers' changes, oldest first, up to ``max_changes`` (at least one)."""
        batch: list[Pending] = []
        while self._queue and (not batch or len(batch) + len(self._queue[0]) <= self.max_changes):
            batch.extend(self._queue.popleft())
        return batch

    def _commit(self, batch: list[Pending]) -> None:
        """Commit ``batch`` until every change in it is settled (see the module docstring)."""
        todo = batch
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            try:
                self.committer.commit(todo)
            except StorageError as exc:
                for pending in todo:  # what a failed commit said about a change counts for nothing
                    pending.unsettle()
                if exc.stored is None:  # the answer was lost: read back before anyone is told
                    todo = self._read_back(todo, exc)
                    if not todo:
                        return
                    if not isinstance(exc, StorageUnavailableError):  # not made, and will not be
                        for pending in todo:
                            pending.fail(self._error_for(pending, exc, stored=False))
                        return
                    if attempt == self.attempts:
                        for pending in todo:
                            pending.fail(self._error_for(pending, exc, stored=False, unavailable=True))
                        return
                elif not isinstance(exc, StorageUnavailableError) or attempt == self.attempts:
                    for pending in todo:
                        pending.fail(self._error_for(pending, exc, stored=False))
                    return
                self._sleep(delay)
                delay *= 2
                continue
            self.commits += 1
            self.changes += len(todo)
            for pending in todo:
                if not pending.settled:  # the committer settles each change; a write it did not is made
                    pending.succeed(pending.version if isinstance(pending.change, Write) else None)
            return

    def _read_back(self, todo: list[Pending], cause: StorageError) -> list[Pending]:
        """After a lost answer: settle the changes that were made; return those that were not."""
        try:
            made = self.committer.applied(todo)
        except StorageError as exc:
            for pending in todo:
                pending.fail(
                    StorageOutcomeUnknownError(
                        f"{self.where}: {_describe(pending)}: the commit's answer was lost ({cause.reason or cause}) "
                        f"and reading back failed too ({exc.reason or exc}); it may or may not have been "
                        "stored: read it to know",
                        operation=_operation(pending),
                        key=pending.key,
                        reason=cause.reason or str(cause),
                    )
                )
            return []
        retry: list[Pending] = []
        for pending, was_made in zip(todo, made, strict=True):
            if not was_made:
                retry.append(pending)
            elif isinstance(pending.change, Write):
                pending.succeed(pending.version)
            else:
                pending.succeed(0 if isinstance(pending.change, DeletePrefix) else None)
        for pending in retry:  # a new try is a new write: it gets a version of its own
            pending.version = new_version()
        return retry

    def _error_for(
        self, pending: Pending, exc: StorageError, *, stored: bool | None, unavailable: bool = False
    ) -> StorageError:
        """``exc`` for one change of the batch: its own key and operation, the batch's reason."""
        kind = StorageUnavailableError if unavailable else type(exc)
        message = str(exc)
        if unavailable:
            message = (
                f"{self.where}: {_describe(pending)} failed: the commit's answer was lost ({exc}) and, read "
                f"back, it was not made, {self.attempts} times; nothing was stored, try again later"
            )
        else:  # a committer's error is about the batch: say which change of it this is
            message = f"{self.where}: {_describe(pending)} failed: {message}"
        if stored is False:
            message = message.replace("; it may or may not have been stored", "")
            if "nothing was" not in message:
                message += "; nothing was stored"
        error = kind(
            message,
            operation=_operation(pending),
            key=pending.key,
            reason=exc.reason or str(exc),
            stored=stored,
        )
        error.__cause__ = exc.__cause__ or exc
        return error


def _operation(pending: Pending) -> str:
    change = pending.change
    return (
        "write"
        if isinstance(change, Write | Sync)
        else "delete"
        if isinstance(change, Delete)
        else "delete_prefix"
    )


def _describe(pending: Pending) -> str:
    return f"{_operation(pending)} of {pending.key!r}"


async def commit_many(storage: Storage, changes: Sequence[Change]) -> list[Outcome]:
    """Make several changes, each with its own outcome (a version, a count, None, or its error).

    On a storage that groups commits (``commit_many`` on SQLite and PostgreSQL, and wrappers that pass it
    on) the changes go into one batch, so into one transaction and one sync; elsewhere they run
    concurrently. Either way one change's conflict fails only that change. Bad keys refuse the whole
    call before anything is changed.
    """
    for change in changes:
        if isinstance(change, Sync):
            raise TypeError("Sync is a storage's own change, not one to commit_many")
        if isinstance(change, DeletePrefix):
            validate_prefix(change.prefix)
        else:
            validate_key(change.key)
    batch = getattr(storage, "commit_many", None)
    if batch is not None:
        return list(await batch(changes))
    from orchestra._concurrency import map_concurrently

    async def one(change: Change) -> Outcome:
        try:
            if isinstance(change, Write):
                return await storage.write(change.key, change.data, expect=change.expect)
            if isinstance(change, Delete):
                await storage.delete(change.key)
                return None
            assert isinstance(change, DeletePrefix)
            return await storage.delete_prefix(change.prefix)
        except StorageError as exc:
            return exc

    return await map_concurrently(one, changes)
