"""Random schedules of the group-commit race, on a real SQLite file: writers queue behind a held commit
and then share batches; while a batch is inside its transaction (every statement run, COMMIT not yet),
hypothesis chooses whether its waiting writers are woken (as an earlier batch's notify can wake them
late), and whether its COMMIT is made, refused, or made with its answer lost.

One rule, checked from outside: a writer told "stored" finds its write from another connection at that
very moment, and it stays stored; a writer told "nothing was stored" finds nothing, now or later.
30 schedules (300 with ``ORCHESTRA_STRESS=1``)."""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestra.errors import StorageConflictError
from orchestra.storage import ABSENT, SQLiteStorage
from orchestra.storage._group_commit import Pending, Write
from tests.session.test_fault_schedules import SETTINGS
from tests.storage.test_group_commit import WatchedCondition, wait_until

EXAMPLES = 300 if os.environ.get("ORCHESTRA_STRESS") == "1" else 30

COMMIT_FAULTS = ["made", "made", "refused", "answer-lost"]


@dataclass
class Schedule:
    writers: list[list[str]]  # each writer's keys, written in one call (a key may be another's too)
    max_batch: int
    wake: list[bool]  # per commit, after the first: wake the waiting writers inside the transaction
    commits: list[str]  # per commit, after the first: what its COMMIT does


schedules = st.builds(
    Schedule,
    writers=st.lists(
        st.lists(st.sampled_from([f"k{i}" for i in range(8)]), min_size=1, max_size=3, unique=True),
        min_size=2,
        max_size=6,
    ),
    max_batch=st.integers(min_value=1, max_value=6),
    wake=st.lists(st.booleans(), min_size=8, max_size=8),
    commits=st.lists(st.sampled_from(COMMIT_FAULTS), min_size=8, max_size=8),
)


class _Connection:
    """The writer's connection, with COMMIT as the schedule says (the rest goes to SQLite)."""

    def __init__(self, conn: sqlite3.Connection, storage: ScheduledSQLite) -> None:
        self.conn = conn
        self.storage = storage

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def execute(self, sql: str, *params: Any) -> Any:
        if sql != "COMMIT":
            return self.conn.execute(sql, *params)
        return self.storage.commit_point(self.conn)


class ScheduledSQLite(SQLiteStorage):
    def __init__(self, path: str, schedule: Schedule) -> None:
        super().__init__(path, max_batch=schedule.max_batch)
        self.schedule = schedule
        self.group._cond = WatchedCondition()
        self.group.attempts = 1
        self.commit_count = 0
        self.held = threading.Event()  # the first commit waits for it: the others queue meanwhile
        self.entered = threading.Event()
        self.finished: list[str] = []  # writers whose call returned (and who looked for their writes)
        self.lock = threading.Lock()

    def _writer_connection(self) -> Any:
        return _Connection(super()._writer_connection(), self)

    def commit_point(self, conn: sqlite3.Connection) -> Any:
        """Inside the transaction, every statement run: the schedule's moment."""
        number = self.commit_count
        self.commit_count += 1
        if number == 0:
            self.entered.set()
            self.held.wait(30)
            return conn.execute("COMMIT")
        index = (number - 1) % len(self.schedule.wake)
        if self.schedule.wake[index]:
            cond = self.group._cond
            with cond:
                waits, waiting, finished = cond.waits, cond.waiting, len(self.finished)
                cond.notify_all()
            # Every waiting writer looks at its change again: it waits again, or returns (and looks for
            # its write from outside, recorded in ``finished``).
            wait_until(
                lambda: (cond.waits - waits) + (len(self.finished) - finished) >= waiting,
                "every woken writer looked again",
            )
        what = self.schedule.commits[index]
        if what == "refused":  # COMMIT failed and the transaction is still open: nothing was made
            raise sqlite3.OperationalError("disk I/O error (injected: COMMIT refused)")
        result = conn.execute("COMMIT")
        if what == "answer-lost":  # made, but SQLite ended the transaction with an error
            raise sqlite3.OperationalError("disk I/O error (injected: COMMIT's answer lost)")
        return result


@dataclass
class Told:
    key: str
    data: bytes
    outcome: str  # "stored", "conflict", "not stored", "unknown"
    visible_when_told: bool | None = None


@dataclass
class Observer:
    path: str
    told: list[Told] = field(default_factory=list)

    def visible(self, key: str, data: bytes) -> bool:
        conn = sqlite3.connect(self.path)
        try:
            row = conn.execute("SELECT data FROM orchestra_storage WHERE key = ?", (key,)).fetchone()
        finally:
            conn.close()
        return row is not None and bytes(row[0]) == data


def run_schedule(schedule: Schedule) -> None:
    root = tempfile.mkdtemp()
    path = os.path.join(root, "race.db")
    storage = ScheduledSQLite(path, schedule)
    observer = Observer(path)
    try:
        _run(storage, observer, schedule)
    finally:
        storage.close()


def _run(storage: ScheduledSQLite, observer: Observer, schedule: Schedule) -> None:
    def write(name: str, changes: Sequence[Write]) -> None:
        try:
            settled: list[Pending] = storage.group.run(changes)
            for pending in settled:
                assert isinstance(pending.change, Write)
                told = Told(pending.key, pending.change.data, _outcome(pending))
                if told.outcome == "stored":  # look from outside, at the moment we are told
                    told.visible_when_told = observer.visible(told.key, told.data)
                with storage.lock:
                    observer.told.append(told)
        finally:
            with storage.lock:
                storage.finished.append(name)

    first = threading.Thread(target=write, args=("first", [Write("first", b"first")]))
    first.start()
    storage.entered.wait(30)
    threads = [
        threading.Thread(
            target=write,
            args=(f"w{n}", [Write(key, f"w{n}:{key}".encode(), expect=ABSENT) for key in keys]),
        )
        for n, keys in enumerate(schedule.writers)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(storage.group._queue) == len(threads), "every writer queued")
    storage.held.set()
    for thread in [first, *threads]:
        thread.join(60)
        assert not thread.is_alive()

    for told in observer.told:
        now = observer.visible(told.key, told.data)
        if told.outcome == "stored":
            assert told.visible_when_told, f"{told.key} was told stored before another connection saw it"
            assert now, f"{told.key} was told stored and is not stored"
        elif told.outcome == "not stored":
            assert not now, f"{told.key} was told not stored, yet it is stored"
    stored_keys = [t.key for t in observer.told if t.outcome == "stored"]
    assert len(stored_keys) == len(set(stored_keys)), "two writers were told they created one key"


def _outcome(pending: Pending) -> str:
    if pending.error is None:
        return "stored"
    if isinstance(pending.error, StorageConflictError):
        return "conflict"
    return {False: "not stored", None: "unknown"}.get(pending.error.stored, "stored")


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(schedule=schedules)
def test_the_group_commit_race_under_random_schedules(schedule: Schedule) -> None:
    run_schedule(schedule)
