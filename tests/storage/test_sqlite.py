"""SQLite storage: WAL and synchronous settings, permissions, errors that say what failed (a full disk, a
file that is not a database, a database held by another process), a commit whose answer is in doubt,
and processes killed while they write."""

from __future__ import annotations

import functools
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading

import anyio
import pytest

from orchestra.errors import (
    ConfigurationError,
    StorageConfigurationError,
    StorageFullError,
    StorageUnavailableError,
)
from orchestra.storage import ABSENT, SQLiteStorage, storage_from_uri


async def test_wal_synchronous_and_permissions(tmp_path):
    storage = SQLiteStorage(tmp_path / "private" / "sessions.db")
    await storage.write("k", b"v")
    conn = sqlite3.connect(tmp_path / "private" / "sessions.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o700
    for name in ("sessions.db", "sessions.db-wal", "sessions.db-shm"):
        assert stat.S_IMODE((tmp_path / "private" / name).stat().st_mode) == 0o600, name
    writer = storage._writer_connection()
    assert writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    relaxed = SQLiteStorage(tmp_path / "relaxed.db", synchronous="NORMAL")
    await relaxed.write("k", b"v")
    assert relaxed._writer_connection().execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with pytest.raises(ConfigurationError, match="FULL or NORMAL"):
        SQLiteStorage(tmp_path / "x.db", synchronous="OFF")  # type: ignore[arg-type]
    storage.close()
    relaxed.close()


def test_uris_name_one_shared_storage_per_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = storage_from_uri("sqlite:./a.db")
    assert first is storage_from_uri(f"sqlite://{tmp_path}/a.db")  # the same file, the same storage
    assert isinstance(first, SQLiteStorage)
    assert first.path == tmp_path / "a.db"
    relaxed = storage_from_uri("sqlite:./a.db?synchronous=normal&timeout=5")
    assert (relaxed.synchronous, relaxed.timeout) == ("NORMAL", 5.0)
    for bad, match in [
        ("sqlite:", "names no file"),
        ("sqlite:./a.db?sync=FULL", "unknown option"),
        ("sqlite:./a.db?synchronous=OFF", "FULL .* or NORMAL"),
        ("sqlite:./a.db?timeout=soon", "number of seconds"),
    ]:
        with pytest.raises(ConfigurationError, match=match):
            storage_from_uri(bad)


async def test_a_file_that_is_not_a_database_is_a_configuration_error(tmp_path):
    (tmp_path / "notes.txt").write_bytes(b"these are my notes, not a database" * 100)
    storage = SQLiteStorage(tmp_path / "notes.txt")
    with pytest.raises(
        StorageConfigurationError, match=r"notes.txt: write of 'k' failed: .*SQLITE_NOTADB"
    ) as info:
        await storage.write("k", b"v")
    assert (info.value.operation, info.value.key, info.value.stored) == ("write", "k", False)
    with pytest.raises(StorageConfigurationError, match="read of 'k'"):
        await storage.read("k")


async def test_a_database_held_by_another_process_is_unavailable_then_usable(tmp_path):
    storage = SQLiteStorage(tmp_path / "db", timeout=0.2)
    await storage.write("k", b"v")
    holder = sqlite3.connect(tmp_path / "db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(StorageUnavailableError, match=r"write of 'k2' failed: database is locked") as info:
        await storage.write("k2", b"v")
    assert info.value.stored is False
    assert "another process held the database" in str(info.value)
    assert await storage.read("k") is not None  # readers do not wait for a writer
    holder.execute("COMMIT")
    await storage.write("k2", b"v")
    assert await storage.list("") == ["k", "k2"]


HOLDER = textwrap.dedent(
    """
    import sqlite3, sys, time

    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")  # the file's write lock (on a new file: in rollback mode)
    conn.execute("CREATE TABLE IF NOT EXISTS theirs (x)")
    print("held", flush=True)
    time.sleep(1.5)
    conn.execute("COMMIT")
    """
)


@pytest.mark.parametrize(
    ("file", "operation"),
    [("new", "read"), ("new", "list"), ("new", "write"), ("in use", "read"), ("in use", "write")],
)
def test_a_first_call_waits_for_another_process_that_holds_the_write_lock(tmp_path, file, operation):
    """Another process holds the file's write lock for 1.5 s while this one's first call runs (new
    connections): the call waits for it, as the busy timeout says, and succeeds. (The switch to WAL of a
    new file answered SQLITE_BUSY at once, which SQLite's busy timeout does not cover.)"""
    path = tmp_path / "db.sqlite"
    if file == "in use":  # made by orchestra before: WAL, the table there
        anyio.run(SQLiteStorage(path).write, "earlier", b"x")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        storage = SQLiteStorage(path)
        if operation == "read":
            assert anyio.run(storage.read, "k") is None
        elif operation == "list":
            assert anyio.run(storage.list, "k") == []
        else:
            anyio.run(functools.partial(storage.write, "k", b"v", expect=ABSENT))
            assert anyio.run(storage.read, "k") is not None
        storage.close()
    finally:
        assert holder.wait(timeout=30) == 0
        holder.stdout.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


async def test_a_full_database_is_storage_full_and_nothing_of_the_batch_is_stored(tmp_path):
    """SQLite's own limit on pages is a full disk to it (SQLITE_FULL), wherever the test runs."""
    storage = SQLiteStorage(tmp_path / "db")
    await storage.write("small", b"x")
    pages = storage._writer_connection().execute("PRAGMA page_count").fetchone()[0]
    storage._writer_connection().execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(StorageFullError, match="write of 'tiny' failed: database or disk is full") as info:
        await storage.write_many([("tiny", b"x"), ("big", os.urandom(100_000))])
    assert info.value.stored is False
    assert "free disk space" in str(info.value)
    assert await storage.read_many(["tiny", "big"]) == [None, None]  # one transaction: neither
    assert await storage.read("small") is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs for a full disk needs root")
async def test_a_real_full_disk_is_storage_full(tmp_path):
    mount = tempfile.mkdtemp(prefix="orchestra-full-disk-")
    mounted = await anyio.run_process(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", mount], check=False
    )
    if mounted.returncode != 0:
        pytest.skip("this machine does not let root mount a tmpfs")
    storage = SQLiteStorage(os.path.join(mount, "db"))
    try:
        await storage.write("small", b"x")
        with pytest.raises(StorageFullError, match="write of 'big' failed: database or disk is full") as info:
            await storage.write("big", os.urandom(1_000_000))
        assert (info.value.key, info.value.stored) == ("big", False)
        assert "nothing was stored" in str(info.value)
        assert await storage.read("big") is None
        await storage.write("after", b"still works")
    finally:
        storage.close()
        await anyio.run_process(["umount", mount], check=False)
        os.rmdir(mount)


class CommitAnswerLost:
    """The writer connection, except that its COMMIT raises after committing (as an I/O error reported
    after the log was written would): the batch must be read back, not reported failed."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lost = 0

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def execute(self, sql, *args):
        result = self.conn.execute(sql, *args)
        if sql == "COMMIT" and not self.lost:
            self.lost += 1
            raise sqlite3.OperationalError("disk I/O error")
        return result


async def test_a_commit_whose_answer_is_in_doubt_is_read_back(tmp_path):
    storage = SQLiteStorage(tmp_path / "db")
    await storage.write("warm", b"x")
    lossy = CommitAnswerLost(storage._writer_connection())
    storage._writer = lossy
    version = await storage.write("journal/1.json", b"turn", expect=ABSENT)
    assert lossy.lost == 1
    assert await storage.read("journal/1.json") == (b"turn", version)
    assert storage.group.commits == 1  # the first (warm); the lost one was read back, not committed again


WRITER = textwrap.dedent(
    """
    import sys
    from orchestra.storage import SQLiteStorage
    import anyio

    async def main():
        storage = SQLiteStorage(sys.argv[1])
        print("ready", flush=True)
        i = int(sys.argv[2])
        while True:
            await storage.write_many([(f"k/{i:06d}/a", b"x" * 3000), (f"k/{i:06d}/b", b"y" * 3000)])
            print(i, flush=True)
            i += 1

    anyio.run(main)
    """
)


def test_a_killed_writer_leaves_a_database_that_opens_with_every_acknowledged_batch(tmp_path):
    """SIGKILL a process while it commits batches of two writes: the database opens, passes SQLite's
    integrity check, holds every batch the process reported done and no half of any batch."""
    rounds = int(os.environ.get("ORCHESTRA_KILL_ROUNDS", "40" if os.environ.get("ORCHESTRA_STRESS") else "8"))
    path = tmp_path / "db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    acknowledged = -1
    for round_number in range(rounds):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(acknowledged + 1)], stdout=subprocess.PIPE, env=env
        )
        assert child.stdout.readline().strip() == b"ready"
        # Kill after a few batches, at a point that moves from round to round.
        for seen, line in enumerate(child.stdout, start=1):
            acknowledged = int(line)
            if seen > 3 + round_number % 5:
                break
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        keys = [k for (k,) in conn.execute("SELECT key FROM orchestra_storage ORDER BY key")]
        conn.close()
        batches = {key.split("/")[1] for key in keys}
        assert len(keys) == 2 * len(batches)  # no half batch
        stored = sorted(int(b) for b in batches)
        assert stored == list(range(len(stored)))
        assert stored[-1] >= acknowledged  # nothing acknowledged is missing
        acknowledged = stored[-1]


def test_threads_and_processes_share_one_file(tmp_path):
    """Writers in two processes and several threads each: every write lands, and listing sees them all."""
    path = tmp_path / "db"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, anyio\nfrom orchestra.storage import SQLiteStorage\n"
            "s = SQLiteStorage(sys.argv[1])\n"
            "async def main():\n"
            "    async with anyio.create_task_group() as g:\n"
            "        for i in range(200): g.start_soon(s.write, f'child/{i:03d}', b'c')\n"
            "anyio.run(main)\n",
            str(path),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )

    def writer(n: int) -> None:
        storage = SQLiteStorage(path)

        async def main():
            async with anyio.create_task_group() as group:
                for i in range(50):
                    group.start_soon(storage.write, f"parent/{n}/{i:03d}", b"p")

        anyio.run(main)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert child.wait(60) == 0
    storage = SQLiteStorage(path)
    keys = anyio.run(storage.list)
    assert len([k for k in keys if k.startswith("child/")]) == 200
    assert len([k for k in keys if k.startswith("parent/")]) == 200
