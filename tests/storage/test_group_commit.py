"""Group commit: concurrent writers share commits, each keeps its own condition, and a batch whose commit
answer was lost is read back before anyone is told anything.

The rules are checked on a committer we control (tests/storage/test_group_commit.py's ``Table``), then on
the real databases: SQLite and PostgreSQL held busy by another transaction, so that the writers that
arrive meanwhile must queue for one shared commit."""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence

import anyio
import pytest

from orchestra.errors import (
    StorageConflictError,
    StorageFullError,
    StorageOutcomeUnknownError,
    StorageUnavailableError,
)
from orchestra.storage import ABSENT, InMemoryStorage, SQLiteStorage
from orchestra.storage._group_commit import (
    Delete,
    DeletePrefix,
    GroupCommit,
    Pending,
    Write,
    commit_many,
)


class Table:
    """A committer over a dict: applies a batch atomically, and can be told to fail the next commits."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[bytes, str]] = {}
        self.batches: list[list[str]] = []
        # ("lose-answer-after" | "lose-answer-before" | "raise" | "fail-at-commit", error)
        self.faults: list[tuple[str, object]] = []
        self.read_back_fails = False
        self.gate: threading.Event | None = None  # a commit waits for it (then it is cleared)
        self.entered = threading.Event()
        # Called inside a commit once its changes are settled and before they take effect ("COMMIT").
        self.before_commit: Callable[[Sequence[Pending]], None] | None = None

    def commit(self, batch: Sequence[Pending]) -> None:
        fault = self.faults.pop(0) if self.faults else None
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
            self.gate = None
        if fault is not None and fault[0] == "raise":
            raise fault[1]
        if fault is not None and fault[0] == "lose-answer-before":
            raise StorageUnavailableError("connection reset before COMMIT arrived", stored=None)
        rows = dict(self.rows)
        for pending in batch:
            change = pending.change
            if isinstance(change, Write):
                current = rows.get(change.key)
                if (change.expect is ABSENT and current is not None) or (
                    isinstance(change.expect, str) and (current is None or current[1] != change.expect)
                ):
                    pending.fail(StorageConflictError(f"conflict on {change.key!r}"))
                    continue
                rows[change.key] = (change.data, pending.version)
                pending.succeed(pending.version)
            elif isinstance(change, Delete):
                rows.pop(change.key, None)
                pending.succeed(None)
        if self.before_commit is not None:
            self.before_commit(batch)
        if fault is not None and fault[0] == "fail-at-commit":  # COMMIT refused: nothing takes effect
            raise fault[1]
        self.rows = rows
        self.batches.append([p.key for p in batch])
        if fault is not None:  # lose-answer-after: committed, but the caller hears a reset
            raise StorageUnavailableError("connection reset after COMMIT", stored=None)

    def applied(self, batch: Sequence[Pending]) -> list[bool]:
        if self.read_back_fails:
            raise StorageUnavailableError("still down", reason="connection refused")
        return [
            self.rows.get(p.key, (b"", ""))[1] == p.version
            if isinstance(p.change, Write)
            else p.key not in self.rows
            for p in batch
        ]


def group(table: Table) -> GroupCommit:
    return GroupCommit(table, where="table", sleep=lambda seconds: None)


def in_threads(*calls):
    results: list[object] = [None] * len(calls)

    def run(index, call):
        results[index] = call()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    return threads, results


def wait_until(condition, what):
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def test_writers_that_arrive_during_a_commit_share_the_next_one():
    table = Table()
    table.gate = threading.Event()
    commits = group(table)
    first, _ = in_threads(lambda: commits.run([Write("first", b"1")]))
    table.entered.wait(30)  # the first writer leads and is inside its commit
    others, results = in_threads(*[lambda i=i: commits.run([Write(f"k{i}", b"x")]) for i in range(20)])
    wait_until(lambda: len(commits._queue) == 20, "20 writers queued")
    table.gate.set()
    for thread in [*first, *others]:
        thread.join(30)
    assert len(table.batches) == 2
    assert table.batches[0] == ["first"]
    assert sorted(table.batches[1]) == sorted(f"k{i}" for i in range(20))
    assert (commits.commits, commits.changes) == (2, 21)
    assert all(r[0].done and r[0].error is None for r in results)


def test_a_callers_changes_stay_together_and_a_batch_is_bounded():
    table = Table()
    table.gate = threading.Event()
    commits = GroupCommit(table, where="table", max_changes=5)
    first, _ = in_threads(lambda: commits.run([Write("first", b"1")]))
    table.entered.wait(30)
    callers, _ = in_threads(
        lambda: commits.run([Write(f"a{i}", b"x") for i in range(3)]),
        lambda: commits.run([Write(f"b{i}", b"x") for i in range(3)]),
        lambda: commits.run([Write(f"c{i}", b"x") for i in range(7)]),
    )
    wait_until(lambda: len(commits._queue) == 3, "three callers queued")
    table.gate.set()
    for thread in [*first, *callers]:
        thread.join(30)
    groups = [sorted({key[0] for key in batch}) for batch in table.batches[1:]]
    assert sorted(map(tuple, groups)) == [("a",), ("b",), ("c",)]  # 3 + 3 > 5; 7 alone
    assert sorted(len(batch) for batch in table.batches[1:]) == [3, 3, 7]


def test_a_conflict_fails_only_its_own_writer():
    table = Table()
    table.rows["taken"] = (b"old", "v0")
    settled = group(table).run(
        [
            Write("new", b"1", ABSENT),
            Write("new", b"2", ABSENT),  # the same key again, in the same batch: it exists by now
            Write("taken", b"3", ABSENT),
            Write("taken", b"4", "wrong"),
            Write("taken", b"5", "v0"),
            Delete("gone"),
        ]
    )
    outcomes = [type(p.error).__name__ if p.error else "ok" for p in settled]
    assert outcomes == [
        "ok",
        "StorageConflictError",
        "StorageConflictError",
        "StorageConflictError",
        "ok",
        "ok",
    ]
    assert table.rows["new"][0] == b"1"
    assert table.rows["taken"] == (b"5", settled[4].version)


def test_a_lost_answer_of_a_commit_that_was_made_is_reported_done_once():
    table = Table()
    table.faults = [("lose-answer-after", None)]
    settled = group(table).run([Write("k", b"v", ABSENT), Write("other", b"w")])
    assert [p.error for p in settled] == [None, None]
    assert [p.result for p in settled] == [table.rows["k"][1], table.rows["other"][1]]
    assert len(table.batches) == 1  # read back, not written again


def test_a_lost_answer_of_a_commit_that_was_not_made_is_tried_again_once():
    table = Table()
    table.faults = [("lose-answer-before", None)]
    [pending] = group(table).run([Write("k", b"v", ABSENT)])
    assert pending.error is None
    assert table.rows["k"] == (b"v", pending.result)
    assert len(table.batches) == 1


def test_a_lost_answer_that_cannot_be_read_back_says_so_per_key():
    table = Table()
    table.faults = [("lose-answer-after", None)]
    table.read_back_fails = True
    settled = group(table).run([Write("session/s1/journal/7.json", b"v", ABSENT), Delete("x")])
    for pending in settled:
        assert isinstance(pending.error, StorageOutcomeUnknownError)
        assert pending.error.stored is None
        assert pending.error.key == pending.key
        assert repr(pending.key) in str(pending.error)
        assert "read it to know" in str(pending.error)


def test_an_outage_is_tried_again_and_then_reported_with_nothing_stored():
    table = Table()
    down = StorageUnavailableError("connection refused", reason="connection refused")
    table.faults = [("raise", down), ("raise", down)]
    [pending] = group(table).run([Write("k", b"v")])
    assert pending.error is None  # the third attempt made it

    table.faults = [("raise", down)] * 3
    [pending] = group(table).run([Write("k2", b"v")])
    assert isinstance(pending.error, StorageUnavailableError)
    assert pending.error.stored is False
    assert pending.error.key == "k2"
    assert "nothing was stored" in str(pending.error)
    assert "k2" not in table.rows


def test_a_full_disk_is_not_retried_and_names_each_key():
    table = Table()
    table.faults = [("raise", StorageFullError("disk full", reason="[Errno 28] No space left on device"))]
    settled = group(table).run([Write("a", b"1"), Write("b", b"2")])
    assert [type(p.error) for p in settled] == [StorageFullError, StorageFullError]
    assert [p.error.key for p in settled] == ["a", "b"]
    assert all(p.error.reason == "[Errno 28] No space left on device" for p in settled)
    assert table.batches == []


def test_a_bug_in_a_commit_fails_its_batch_instead_of_hanging_the_followers():
    table = Table()
    table.gate = threading.Event()
    table.faults = [("raise", ZeroDivisionError("a bug"))]
    commits = group(table)
    leader, leader_result = in_threads(lambda: _catch(lambda: commits.run([Write("a", b"1")])))
    table.entered.wait(30)
    table.faults.append(("raise", ZeroDivisionError("a bug")))  # the follower's own batch fails too
    follower, follower_result = in_threads(lambda: _catch(lambda: commits.run([Write("b", b"1")])))
    wait_until(lambda: len(commits._queue) == 1, "the follower queued")
    table.gate.set()
    for thread in [*leader, *follower]:
        thread.join(30)
    assert isinstance(leader_result[0], ZeroDivisionError)
    assert isinstance(follower_result[0], ZeroDivisionError)
    assert commits.run([Write("c", b"1")])[0].error is None  # and the next writer still commits


class WatchedCondition(threading.Condition):
    """A condition that counts the waits begun on it and the threads waiting now (under its lock), so a
    test can tell that a woken thread has looked at its change again and gone back to waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0
        self.waiting = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        self.waiting += 1
        try:
            return super().wait(timeout)
        finally:  # the lock is held again here
            self.waiting -= 1


@pytest.mark.parametrize("commit", ["succeeds", "fails"])
def test_a_follower_woken_while_its_batch_commits_waits_for_the_commit(commit):
    """Two writers queue behind a commit and then share the next batch, led by one of them. While that
    batch is inside its transaction (every change settled, COMMIT not yet run), the other writer is woken
    (as an earlier batch's notify can wake it late). It must go back to waiting: told "stored" before
    COMMIT, a reader would not find its write, and a COMMIT that then fails would make it a lie."""
    table = Table()
    table.gate = threading.Event()
    commits = group(table)
    commits._cond = WatchedCondition()
    results: dict[str, list[Pending]] = {}
    returned_during_commit: list[str] = []

    def write(key: str) -> None:
        results[key] = commits.run([Write(key, b"v")])

    def wake_the_follower(batch: Sequence[Pending]) -> None:
        if [p.key for p in batch] == ["first"]:
            return
        with commits._cond:
            waits = commits._cond.waits
            commits._cond.notify_all()
        # The follower looks at its change again (under the lock, after this notify): it returns, or
        # it waits again.
        wait_until(lambda: commits._cond.waits > waits or len(results) > 1, "the follower looked again")
        returned_during_commit.extend(key for key in results if key != "first")

    table.before_commit = wake_the_follower
    first = threading.Thread(target=write, args=("first",))
    first.start()
    table.entered.wait(30)
    if commit == "fails":  # the second batch's COMMIT is refused
        table.faults.append(("fail-at-commit", StorageFullError("COMMIT failed: disk full")))
    followers = [threading.Thread(target=write, args=(key,)) for key in ("f", "g")]
    for thread in followers:
        thread.start()
    wait_until(lambda: len(commits._queue) == 2, "two writers queued behind the first commit")
    table.gate.set()
    for thread in [first, *followers]:
        thread.join(30)
    assert returned_during_commit == [], "a writer was answered while its batch was still committing"
    for key in ("f", "g"):
        [pending] = results[key]
        if commit == "succeeds":
            assert pending.error is None
            assert table.rows[key][1] == pending.result
        else:
            assert isinstance(pending.error, StorageFullError)
            assert pending.error.stored is False
            assert key not in table.rows


def _catch(call):
    try:
        return call()
    except BaseException as exc:
        return exc


async def test_commit_many_gives_each_change_its_outcome_on_any_storage():
    storage = InMemoryStorage()
    await storage.write("taken", b"x")
    outcomes = await commit_many(
        storage,
        [Write("a", b"1", ABSENT), Write("taken", b"2", ABSENT), Delete("taken"), DeletePrefix("zz/")],
    )
    assert isinstance(outcomes[0], str)
    assert isinstance(outcomes[1], StorageConflictError)
    assert outcomes[2:] == [None, 0]


# -- the real databases ---------------------------------------------------------------------------------


async def test_sqlite_writers_that_wait_for_the_write_lock_share_one_transaction(tmp_path):
    """Another connection holds SQLite's write lock; 20 writers arrive: the first leads and waits for the
    lock, the other 19 queue behind it and commit together: two transactions in all."""
    storage = SQLiteStorage(tmp_path / "db.sqlite")
    await storage.write("warm", b"x")  # the table exists
    before = storage.group.commits
    blocker = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    async with anyio.create_task_group() as tasks:
        for i in range(20):
            tasks.start_soon(functools.partial(storage.write, f"k{i:02d}", b"v", expect=ABSENT))
        await anyio.to_thread.run_sync(
            wait_until, lambda: len(storage.group._queue) == 19, "19 writers queued behind the leader"
        )
        blocker.execute("COMMIT")
    assert storage.group.commits - before == 2
    assert await storage.list("k") == [f"k{i:02d}" for i in range(20)]
    storage.close()


async def test_postgres_writers_that_wait_for_a_lock_share_one_transaction(postgres_storage, postgres_uri):
    import psycopg

    from tests.postgres import server_url

    await postgres_storage.write("warm", b"x")
    before = postgres_storage.group.commits
    schema = postgres_uri.rsplit("%3D", 1)[1]
    with psycopg.connect(server_url(), autocommit=True) as blocker:
        blocker.execute("BEGIN")
        blocker.execute(f"LOCK TABLE {schema}.orchestra_storage IN EXCLUSIVE MODE")
        async with anyio.create_task_group() as tasks:
            for i in range(20):
                tasks.start_soon(functools.partial(postgres_storage.write, f"k{i:02d}", b"v", expect=ABSENT))
            await anyio.to_thread.run_sync(
                wait_until, lambda: len(postgres_storage.group._queue) == 19, "19 writers queued"
            )
            blocker.execute("COMMIT")
    assert postgres_storage.group.commits - before == 2
    assert await postgres_storage.list("k") == [f"k{i:02d}" for i in range(20)]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_one_batch_keeps_each_writers_condition(kind, tmp_path, request):
    storage = (
        SQLiteStorage(tmp_path / "db") if kind == "sqlite" else request.getfixturevalue("postgres_storage")
    )
    version = await storage.write("taken", b"old")
    outcomes = await commit_many(
        storage,
        [
            Write("new", b"1", ABSENT),
            Write("new", b"2", ABSENT),
            Write("taken", b"3", "not-its-version"),
            Write("taken", b"4", version),
            Write("taken", b"5", version),  # its version changed just before, in the same transaction
            Delete("gone"),
            DeletePrefix("nothing/"),
        ],
    )
    kinds = [type(o).__name__ for o in outcomes]
    assert kinds == [
        "str",
        "StorageConflictError",
        "StorageConflictError",
        "str",
        "StorageConflictError",
        "NoneType",
        "int",
    ]
    assert "'new'" in str(outcomes[1])
    assert "already exists" in str(outcomes[1])
    assert await storage.read("new") == (b"1", outcomes[0])
    assert await storage.read("taken") == (b"4", outcomes[3])


async def test_commit_many_through_a_prefixed_view_is_still_one_commit(tmp_path):
    from orchestra.storage import PrefixedStorage

    inner = SQLiteStorage(tmp_path / "db")
    await inner.write("ws/acme/taken", b"x")
    view = PrefixedStorage(inner, "ws/acme")
    before = inner.group.commits
    outcomes = await commit_many(
        view,
        [
            Write("session/s1/journal/1.json", b"turn", ABSENT),
            Write("runs/r1.json", b"{}"),
            Write("taken", b"y", ABSENT),
        ],
    )
    assert inner.group.commits - before == 1
    assert isinstance(outcomes[2], StorageConflictError)
    assert outcomes[2].key == "taken"  # as the caller named it
    assert await view.read("runs/r1.json") == (b"{}", outcomes[1])
    assert await inner.list("ws/") == [
        "ws/acme/runs/r1.json",
        "ws/acme/session/s1/journal/1.json",
        "ws/acme/taken",
    ]


async def test_local_writers_of_one_folder_share_its_fsync_and_other_folders_do_not_wait(
    tmp_path, monkeypatch
):
    """Local files write and rename in each caller's thread, then group only the folder's fsync: the
    first writer's fsync is held; a writer in another folder finishes meanwhile; the 10 writers that
    arrive in the held folder share one fsync after it."""
    from orchestra.storage import LocalFileStorage

    storage = LocalFileStorage(tmp_path / "store")
    real = LocalFileStorage._sync_folder
    held, entered, synced = threading.Event(), threading.Event(), []

    def sync_folder(where, fd, key):
        synced.append(key)
        if key == "run/journal/first.json":
            entered.set()
            held.wait(30)
        real(where, fd, key)

    monkeypatch.setattr(LocalFileStorage, "_sync_folder", staticmethod(sync_folder))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(functools.partial(storage.write, "run/journal/first.json", b"1", expect=ABSENT))
        await anyio.to_thread.run_sync(entered.wait, 30)
        await storage.write("other/journal/0.json", b"x", expect=ABSENT)  # not held up by the other folder
        for i in range(10):
            tasks.start_soon(functools.partial(storage.write, f"run/journal/{i}.json", b"x", expect=ABSENT))
        group = storage._syncs["run/journal"]
        await anyio.to_thread.run_sync(wait_until, lambda: len(group._queue) == 10, "10 writers queued")
        held.set()
    assert len(synced) == 3  # the held one, the other folder's, and one for the ten
    assert len(await storage.list("run/journal/")) == 11
