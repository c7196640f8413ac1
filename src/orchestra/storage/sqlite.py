"""``SQLiteStorage`` (``sqlite:PATH``): every key a row of one table in an SQLite file, in WAL mode.

- **Durable by default.** ``synchronous=FULL``: a commit returns once the write-ahead log is fsynced, so
  an acknowledged write survives a power loss. ``synchronous=NORMAL`` syncs the log only at checkpoints:
  a write still survives the process being killed (the log is in the file system), but the last
  commits before a power loss or an OS crash may be gone - the database stays consistent either way.
- **Group commit.** Writes and deletes go through ``GroupCommit``: those that arrive while a transaction
  commits go into the next one together, so concurrent writers share one fsync. Conditional writes are
  done by SQLite (``INSERT ... ON CONFLICT DO NOTHING``, ``UPDATE ... WHERE version = ?``), each on its
  own: one writer's conflict fails only that writer.
- **Several processes on one file** (a CLI beside a server): each transaction takes SQLite's write lock
  (``BEGIN IMMEDIATE``, waiting up to ``timeout`` for another process's transaction), so a conditional
  write holds across processes and a second writer of a session is refused exactly as on files and S3.
  Readers never wait for a writer (WAL). A new file is switched to WAL once, by its first connection;
  that switch, which SQLite does not cover by its busy timeout, is tried again until ``timeout`` too, so
  no call fails at once because another process holds the file. A killed process leaves the log, which
  the next opener replays: the database opens with every committed transaction, and nothing of an
  unfinished one. The file must be on a local file system (WAL needs shared memory between the
  processes; not NFS).
- The file and its ``-wal`` and ``-shm`` companions are created 0600, its folder 0700.

Errors name the file, the operation and the key: a full disk is ``StorageFullError``, a database locked
by another process for longer than ``timeout`` ``StorageUnavailableError``, a read-only file or one that
is not a database ``StorageConfigurationError``; a commit whose answer is in doubt is read back.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from orchestra.errors import (
    ConfigurationError,
    StorageConfigurationError,
    StorageError,
    StorageFullError,
    StorageUnavailableError,
)
from orchestra.storage._group_commit import Pending
from orchestra.storage._sql import TABLE, SQLStorage

__all__ = ["SQLiteStorage"]

_STATEMENTS = {
    "upsert": f"INSERT INTO {TABLE} (key, data, version) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET data = excluded.data, version = excluded.version",
    "insert": f"INSERT INTO {TABLE} (key, data, version) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
    "update": f"UPDATE {TABLE} SET data = ?, version = ? WHERE key = ? AND version = ?",
    "delete": f"DELETE FROM {TABLE} WHERE key = ?",
}
_CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY NOT NULL, data BLOB NOT NULL, version TEXT NOT NULL)"
_MAX_PARAMS = 500  # keys per SELECT ... IN (...), well below SQLite's limit on parameters

# SQLite's primary result codes (https://www.sqlite.org/rescode.html) that say what kind of failure it is.
_FULL = {13}  # SQLITE_FULL
_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_MISCONFIGURED = {3, 8, 14, 23, 26}  # SQLITE_PERM, READONLY, CANTOPEN, AUTH, NOTADB


class SQLiteStorage(SQLStorage):
    """Storage in an SQLite database file (see the module docstring).

    Args:
        path: the database file (created, with its folder, if missing).
        synchronous: ``"FULL"`` (the default: durable on power loss) or ``"NORMAL"`` (durable when the
            process dies, not when the machine does; see the module docstring).
        timeout: seconds a transaction waits for another process's transaction on the same file.
        max_batch: changes per group commit at most (callers' changes are never split).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        timeout: float = 30.0,
        max_batch: int = 1000,
    ) -> None:
        if str(synchronous).upper() not in ("FULL", "NORMAL"):
            raise ConfigurationError(
                f"SQLiteStorage: synchronous must be FULL or NORMAL, not {synchronous!r}"
            )
        self.path = Path(path).absolute()
        self.synchronous = str(synchronous).upper()
        self.timeout = timeout
        self.where = f"sqlite:{self.path}"
        super().__init__(max_batch=max_batch)
        self._lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._readers: list[sqlite3.Connection] = []
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"SQLiteStorage({str(self.path)!r})"

    # -- connections -------------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if not self.path.exists():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # SQLite gives its -wal and -shm files the database file's permissions.
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            # WAL is a property of the file, set once: a connection to a file already in WAL sends nothing
            # that needs a lock, so it never meets another process's write lock here.
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                self._switch_to_wal(conn)
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            # A deleted row's bytes are zeroed, not left in a free page for anyone who reads the file
            # (erasure: ``scrub`` then checkpoints the log, which holds the pages as they were).
            conn.execute("PRAGMA secure_delete=ON")
            if (
                conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)
                ).fetchone()
                is None
            ):
                # Under the write lock taken up front (which waits for another process's), not by upgrading
                # a read, which SQLite would refuse at once if another process wrote meanwhile.
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(_CREATE)
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _switch_to_wal(self, conn: sqlite3.Connection) -> None:
        """Put a new file (SQLite starts it in rollback mode) in WAL mode. The switch needs the file to
        itself, and SQLite answers SQLITE_BUSY at once, without its busy timeout, while another connection
        holds a lock: so it is tried again until ``timeout``, as every other statement waits."""
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _BUSY or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        if str(mode).lower() != "wal":
            raise StorageConfigurationError(
                f"{self.where}: SQLite could not switch the database to WAL mode (it is in {mode!r} "
                "mode); put the file on a local file system",
                operation="open",
                reason=f"journal_mode={mode}",
            )

    def _forked(self) -> None:
        """A child process must not use its parent's connections: it opens its own."""
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._writer = None
            self._readers = []

    def _writer_connection(self) -> sqlite3.Connection:
        # Only GroupCommit's leader commits, one at a time: one connection is enough for the writes.
        with self._lock:
            self._forked()
            if self._writer is None:
                self._writer = self._connect()
            return self._writer

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._forked()
            conn = self._readers.pop() if self._readers else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        finally:
            with self._lock:
                if len(self._readers) < 8 and os.getpid() == self._pid:
                    self._readers.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    def close(self) -> None:
        """Close the connections (the last one to close checkpoints the log into the database)."""
        with self._lock:
            connections = [c for c in [self._writer, *self._readers] if c is not None]
            self._writer, self._readers = None, []
        for conn in connections:
            conn.close()

    async def scrub(self) -> None:
        """Checkpoint the write-ahead log into the database and truncate it to nothing: deleted rows are
        zeroed in the database (``secure_delete``), but the log keeps the pages as they were until a
        checkpoint. Waits (up to ``timeout``) for readers and writers to let the checkpoint through.

        Raises:
            StorageUnavailableError: the log could not be checkpointed within ``timeout``.
        """
        import anyio.to_thread

        await anyio.to_thread.run_sync(self._scrub)

    def _scrub(self) -> None:
        started = time.monotonic()
        conn = self._connect()
        try:
            while True:
                busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    return
                if time.monotonic() - started >= self.timeout:
                    raise StorageUnavailableError(
                        f"{self.where}: scrub could not checkpoint the write-ahead log within "
                        f"{self.timeout}s (other connections kept it busy); deleted data may remain in the log",
                        operation="scrub",
                        key="",
                        reason="SQLITE_BUSY",
                    )
                time.sleep(0.01)
        except sqlite3.Error as exc:
            raise self._error(exc, "scrub", "", stored=None, started=started) from None
        finally:
            conn.close()

    # -- errors ------------------------------------------------------------------------------------------

    def _error(
        self, exc: sqlite3.Error, operation: str, key: str, *, stored: bool | None, started: float
    ) -> StorageError:
        """``exc`` as the storage error it means; ``started``: when the operation began (``time.monotonic``),
        so that a busy database is said to have been held as long as it was waited for, no longer."""
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        name = getattr(exc, "sqlite_errorname", type(exc).__name__)
        reason = f"{exc} ({name})"
        what = f"{self.where}: {operation} of {key!r} failed: {reason}"
        outcome = {False: "nothing was stored", None: "it may or may not have been stored"}.get(stored, "")
        kind: type[StorageError]
        if code in _FULL:
            kind, hint = StorageFullError, "; free disk space"
        elif code in _BUSY:
            waited = time.monotonic() - started
            kind, hint = (
                StorageUnavailableError,
                f"; another process held the database for over {self.timeout}s"
                if waited >= 0.9 * self.timeout  # SQLite's busy handler may give up a little early
                else f"; another process held a lock on the database (SQLite answered after {waited:.2f}s, "
                f"without waiting the {self.timeout}s timeout)",
            )
        elif code in _MISCONFIGURED:
            kind, hint = (
                StorageConfigurationError,
                "; check the file's path, permissions and that it is an SQLite database",
            )
        else:
            kind, hint = StorageError, ""
        if operation == "commit":  # GroupCommit names the storage and each change
            what = reason
        message = f"{what}{hint}" + (f"; {outcome}" if outcome and operation not in ("read", "list") else "")
        error = kind(message, operation=operation, key=key, reason=reason, stored=stored)
        error.__cause__ = exc
        return error

    # -- the committer and the queries (worker threads) ----------------------------------------------------

    def commit(self, batch: Sequence[Pending]) -> None:
        first = batch[0]
        started = time.monotonic()
        try:
            conn = self._writer_connection()
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc, "commit", first.key, stored=False, started=started) from None
        try:
            for pending in batch:
                kind, params = self.statement(pending)
                if kind == "delete_range":
                    low, high = params
                    cursor = conn.execute(
                        f"DELETE FROM {TABLE} WHERE key >= ?" + (" AND key < ?" if high is not None else ""),
                        (low,) if high is None else (low, high),
                    )
                else:
                    cursor = conn.execute(_STATEMENTS[kind], params)
                self.settle(pending, cursor.rowcount)
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise self._error(exc, "commit", first.key, stored=False, started=started) from None
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:  # the transaction is still open: nothing of it was made
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self._error(exc, "commit", first.key, stored=False, started=started) from None
            # SQLite ended the transaction itself (an I/O error while committing): read it back.
            raise self._error(exc, "commit", first.key, stored=None, started=started) from None

    def _select(self, keys: Sequence[str]) -> dict[str, tuple[bytes, str]]:
        found: dict[str, tuple[bytes, str]] = {}
        started = time.monotonic()
        try:
            with self._reader() as conn:
                for start in range(0, len(keys), _MAX_PARAMS):
                    chunk = list(keys[start : start + _MAX_PARAMS])
                    marks = ", ".join("?" * len(chunk))
                    for key, data, version in conn.execute(
                        f"SELECT key, data, version FROM {TABLE} WHERE key IN ({marks})", chunk
                    ):
                        found[key] = (bytes(data), version)
        except sqlite3.Error as exc:
            raise self._error(exc, "read", keys[0] if keys else "", stored=False, started=started) from None
        return found

    def _select_keys(
        self, low: str, high: str | None, start_after: str | None, limit: int | None
    ) -> list[str]:
        query, params = f"SELECT key FROM {TABLE} WHERE key >= ?", [low]
        if high is not None:
            query, params = f"{query} AND key < ?", [*params, high]
        if start_after is not None:
            query, params = f"{query} AND key > ?", [*params, start_after]
        query += " ORDER BY key"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        started = time.monotonic()
        try:
            with self._reader() as conn:
                return [key for (key,) in conn.execute(query, params)]
        except sqlite3.Error as exc:
            raise self._error(exc, "list", low, stored=False, started=started) from None

    def _select_versions(self, low: str, high: str | None) -> list[tuple[str, str]]:
        query, params = f"SELECT key, version FROM {TABLE} WHERE key >= ?", [low]
        if high is not None:
            query, params = f"{query} AND key < ?", [*params, high]
        started = time.monotonic()
        try:
            with self._reader() as conn:
                return [(key, version) for key, version in conn.execute(query + " ORDER BY key", params)]
        except sqlite3.Error as exc:
            raise self._error(exc, "list", low, stored=False, started=started) from None
