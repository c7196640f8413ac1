"""``PostgresStorage`` (``postgresql://...``): every key a row of one table in PostgreSQL, for many
servers or workers on one database. Needs ``pip install 'orchestra-agents[postgres]'`` (psycopg 3 and its pool).

- **Conditional writes are done by the database** (``INSERT ... ON CONFLICT DO NOTHING``, ``UPDATE ...
  WHERE version = ...``): two servers racing for one key get exactly one winner, with no lock held
  between a read and a write.
- **Group commit.** Writes and deletes go through ``GroupCommit``: those that arrive while a transaction
  commits share the next one, sent as one pipeline (the statements, then COMMIT, in one round trip).
  A write returns once PostgreSQL has committed it (durably, with the server's default
  ``synchronous_commit=on``); ``durable=False`` sets ``synchronous_commit=off`` for these transactions
  only: a write returns once it is written, and the server's last commits before a crash of the
  *database server* may be lost (never half of one).
- **Connection loss and failover.** A read that loses its connection is retried on a new one. A commit
  that fails before COMMIT was sent rolls back and is retried (the outage kept on: ``StorageUnavailableError``
  naming the key, nothing stored). A commit whose answer was lost is read back: each write's version is
  a token made for it, so a write that is there was ours and is reported done; one that is not is tried
  again. Nothing is lost and nothing stored twice. For failover give libpq every host and
  ``target_session_attrs=read-write`` (``postgresql://db1,db2/app?target_session_attrs=read-write``):
  new connections then find the new primary; a transaction sent to a server that became read-only
  answers ``StorageUnavailableError`` and is retried.
- The table (``orchestra_storage``) is created on first use, in the connection's schema: another schema
  is ``?options=-csearch_path%3Dmy_schema`` in the URI (libpq's own parameter).

Errors name the operation, the key and PostgreSQL's reason (its SQLSTATE): a full disk is
``StorageFullError``; a bad password, a missing database or a missing privilege
``StorageConfigurationError``; a lost connection or an overloaded server ``StorageUnavailableError``.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from orchestra._dist import install_hint
from orchestra.errors import (
    ConfigurationError,
    StorageConfigurationError,
    StorageError,
    StorageFullError,
    StorageUnavailableError,
)
from orchestra.storage._group_commit import Pending
from orchestra.storage._sql import TABLE, SQLStorage

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresStorage"]

_STATEMENTS = {
    "upsert": f"INSERT INTO {TABLE} (key, data, version) VALUES (%s, %s, %s) "
    "ON CONFLICT (key) DO UPDATE SET data = excluded.data, version = excluded.version",
    "insert": f"INSERT INTO {TABLE} (key, data, version) VALUES (%s, %s, %s) ON CONFLICT (key) DO NOTHING",
    "update": f"UPDATE {TABLE} SET data = %s, version = %s WHERE key = %s AND version = %s",
    "delete": f"DELETE FROM {TABLE} WHERE key = %s",
}
# COLLATE "C": keys compare byte by byte, so an index range answers a prefix and lists in Python's order.
_CREATE = (
    f'CREATE TABLE IF NOT EXISTS {TABLE} (key text COLLATE "C" PRIMARY KEY, data bytea NOT NULL, '
    "version text NOT NULL)"
)

# SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html) by what they mean to a caller.
_CONNECTION_LOST = {"57P01", "57P02", "57P03"}  # admin/crash shutdown, cannot connect now; and class 08
_FULL = {"53100"}  # disk_full
_PASSING = {"40001", "40P01", "53200", "53300", "53400", "55P03", "57014", "25006", "58000", "58030"}
_MISCONFIGURED_CLASSES = {"28", "3D", "3F", "42"}  # authorization, no database, no schema, no privilege/table
_PASSING_AT_CONNECT = ("starting up", "shutting down", "in recovery", "too many clients", "timeout")


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise ConfigurationError(
            "PostgresStorage needs psycopg 3 and psycopg-pool: " + install_hint("postgres")
        ) from None
    return psycopg, psycopg_pool


def _redact(conninfo: str) -> str:
    """The connection string without its password, for messages."""
    conninfo = re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", conninfo)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", conninfo)


class PostgresStorage(SQLStorage):
    """Storage in a PostgreSQL table (see the module docstring).

    Args:
        conninfo: a libpq connection URI or string (``postgresql://user@host:5432/db``).
        durable: False returns a write once PostgreSQL has it in memory (``synchronous_commit=off``).
        min_connections, max_connections: the connection pool's bounds (one commit uses one connection
            at a time; the rest serve reads).
        timeout: seconds to wait for a connection before the call fails as unavailable.
        attempts: tries of a read, and of a commit while the database is unreachable.
        max_batch: changes per group commit at most (callers' changes are never split).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        durable: bool = True,
        min_connections: int = 1,
        max_connections: int = 10,
        timeout: float = 10.0,
        attempts: int = 3,
        max_batch: int = 1000,
    ) -> None:
        _psycopg()
        self.conninfo = conninfo
        self.durable = durable
        self.min_connections = min_connections
        self.max_connections = max_connections
        self.timeout = timeout
        self.attempts = attempts
        self.where = _redact(conninfo)
        super().__init__(max_batch=max_batch)
        self.group.attempts = attempts
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] | None = None
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"PostgresStorage({self.where!r})"

    # -- connections -------------------------------------------------------------------------------------

    def _open_pool(self, operation: str, key: str) -> ConnectionPool[Any]:
        """The pool, opened on first use (and again in a forked child): the table is made first, on a
        connection of its own, so that a wrong password or database is reported as itself."""
        with self._lock:
            if self._pool is not None and os.getpid() == self._pid:
                return self._pool
            psycopg, psycopg_pool = _psycopg()
            try:
                with psycopg.connect(
                    self.conninfo, autocommit=True, connect_timeout=int(self.timeout)
                ) as conn:
                    # Made only if missing: a role that may not create tables can use one made for it.
                    if conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is None:
                        with conn.transaction():
                            # Two processes creating the table at once would collide in the catalog.
                            conn.execute("SELECT pg_advisory_xact_lock(hashtext('orchestra_storage'))")
                            conn.execute(_CREATE)
            except psycopg.Error as exc:
                raise self._error(exc, operation, key, stored=False) from None
            self._pid = os.getpid()
            self._pool = psycopg_pool.ConnectionPool(
                self.conninfo,
                min_size=self.min_connections,
                max_size=self.max_connections,
                kwargs={"autocommit": True},
                timeout=self.timeout,
                # The pool retries a lost connection with a growing delay; giving up after `timeout`
                # lets the next call connect at once once the server is back (after an outage or a
                # failover), instead of waiting out the delay.
                reconnect_timeout=self.timeout,
                name=f"orchestra-{id(self):x}",
                open=False,
            )
            self._pool.open(wait=False)
            return self._pool

    @contextlib.contextmanager
    def _connection(self, operation: str, key: str) -> Iterator[psycopg.Connection[Any]]:
        _, psycopg_pool = _psycopg()
        pool = self._open_pool(operation, key)
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise StorageUnavailableError(
                f"{self._failed(operation, key)}no connection within {self.timeout}s "
                f"({self._why_unreachable()}); nothing was stored, try again later",
                operation=operation,
                key=key,
                reason=str(exc),
            ) from exc

    @contextlib.contextmanager
    def _live_connection(self, operation: str, key: str) -> Iterator[psycopg.Connection[Any]]:
        """A connection that answered just now. A commit sent on a connection that had died unnoticed
        (the server restarted, a failover) would be in doubt and need reading back; one that is known
        alive fails in doubt only if it dies during the commit itself. Costs one round trip per batch."""
        psycopg, _ = _psycopg()
        for _ in range(self.max_connections + 1):
            with self._connection(operation, key) as conn:
                try:
                    conn.execute("")
                except psycopg.Error:
                    continue  # a dead connection: the pool drops it when it comes back
                yield conn
                return
        raise StorageUnavailableError(
            f"{self._failed(operation, key)}every connection was lost "
            f"({self._why_unreachable()}); nothing was stored, try again later",
            operation=operation,
            key=key,
            reason="connections lost",
        )

    def _why_unreachable(self) -> str:
        """What a fresh connection says (the pool only logs why it could not connect)."""
        psycopg, _ = _psycopg()
        try:
            psycopg.connect(self.conninfo, connect_timeout=2).close()
        except psycopg.Error as exc:
            return str(exc).strip()
        return "the pool's connections were all busy"

    def close(self) -> None:
        """Close the connection pool."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # -- errors ------------------------------------------------------------------------------------------

    def _error(self, exc: Exception, operation: str, key: str, *, stored: bool | None) -> StorageError:
        """A psycopg error as the storage error it means (see the module docstring)."""
        sqlstate = getattr(exc, "sqlstate", None) or ""
        reason = f"{str(exc).strip()}" + (f" (SQLSTATE {sqlstate})" if sqlstate else "")
        kind: type[StorageError]
        if not sqlstate:  # libpq's own: the connection could not be made, or was lost
            message = str(exc)
            fatal = "FATAL" in message and not any(word in message for word in _PASSING_AT_CONNECT)
            kind = StorageConfigurationError if fatal else StorageUnavailableError
        elif sqlstate in _FULL:
            kind = StorageFullError
        elif sqlstate[:2] == "08" or sqlstate in _CONNECTION_LOST or sqlstate in _PASSING:
            kind = StorageUnavailableError
        elif sqlstate[:2] in _MISCONFIGURED_CLASSES:
            kind = StorageConfigurationError
        else:
            kind = StorageError
        outcome = {False: "; nothing was stored", None: "; it may or may not have been stored"}[stored]
        message = (
            self._failed(operation, key) + reason + (outcome if operation not in ("read", "list") else "")
        )
        if kind is StorageUnavailableError:
            message += ", try again later"
        error = kind(message, operation=operation, key=key, reason=reason, stored=stored)
        error.__cause__ = exc
        return error

    def _failed(self, operation: str, key: str) -> str:
        """How a message starts: the storage, the operation and the key (for a commit, GroupCommit says
        which change of the batch each caller's was)."""
        return "" if operation == "commit" else f"{self.where}: {operation} of {key!r} failed: "

    @staticmethod
    def _lost(exc: Exception) -> bool:
        """Whether an error means the connection went away (so the answer may have been lost)."""
        sqlstate = getattr(exc, "sqlstate", None) or ""
        return not sqlstate or sqlstate[:2] == "08" or sqlstate in _CONNECTION_LOST

    # -- the committer and the queries (worker threads) ----------------------------------------------------

    def commit(self, batch: Sequence[Pending]) -> None:
        psycopg, _ = _psycopg()
        first = batch[0]
        cursors = []
        with self._live_connection("commit", first.key) as conn:
            try:
                # One pipeline, one round trip: BEGIN, every statement, COMMIT. (psycopg's transaction()
                # would wait for the answers of BEGIN and of COMMIT on their own.)
                with conn.pipeline():
                    conn.execute("BEGIN")
                    if not self.durable:
                        conn.execute("SET LOCAL synchronous_commit = off")
                    for pending in batch:
                        kind, params = self.statement(pending)
                        cursor = conn.cursor()
                        if kind == "delete_range":
                            low, high = params
                            if high is None:
                                cursor.execute(f"DELETE FROM {TABLE} WHERE key >= %s", (low,))
                            else:
                                cursor.execute(
                                    f"DELETE FROM {TABLE} WHERE key >= %s AND key < %s", (low, high)
                                )
                        else:
                            cursor.execute(_STATEMENTS[kind], params)
                        cursors.append(cursor)
                    conn.execute("COMMIT")
            except psycopg.Error as exc:
                # The server's own error (a SQLSTATE) aborted the transaction: nothing was made. A lost
                # connection may have lost the answer of a COMMIT that was made: GroupCommit reads back.
                lost = self._lost(exc)
                if not lost:
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("ROLLBACK")  # the failed transaction, still open on the connection
                raise self._error(exc, "commit", first.key, stored=None if lost else False) from None
        for pending, cursor in zip(batch, cursors, strict=True):
            self.settle(pending, cursor.rowcount)

    def _query(self, operation: str, key: str, query: str, params: Sequence[Any]) -> list[Any]:
        """Run a read-only query, again on a new connection if the connection was lost."""
        psycopg, _ = _psycopg()
        for attempt in range(1, self.attempts + 1):
            try:
                with self._connection(operation, key) as conn:
                    return conn.execute(query, params).fetchall()
            except psycopg.Error as exc:
                if attempt == self.attempts or not self._lost(exc):
                    raise self._error(exc, operation, key, stored=False) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def scrub(self) -> None:
        """Rewrite the table (``VACUUM FULL``): a deleted row stays in its page, bytes and all, until then
        (a plain ``VACUUM`` frees the space but leaves the bytes). The rewrite locks the table against
        every read and write while it runs: seconds on a large table. PostgreSQL's write-ahead log, its
        replicas and its backups still hold the rows until they roll over (see docs/memory.md).

        A row deleted while another transaction of the database may still see it is copied by the
        rewrite: the scrub tries again for up to ``timeout`` while PostgreSQL says such rows remain.

        Raises:
            StorageUnavailableError: deleted rows were still visible to an open transaction after
                ``timeout``; they stay until a later scrub.
        """
        import anyio
        import anyio.to_thread

        def vacuum() -> int:
            psycopg, _ = _psycopg()
            kept: list[int] = []

            def notice(diagnostic: Any) -> None:
                found = re.search(
                    r"(\d+) dead row versions cannot be removed", diagnostic.message_detail or ""
                )
                if found:
                    kept.append(int(found.group(1)))

            with self._connection("scrub", "") as conn:
                conn.add_notice_handler(notice)
                try:
                    # The rewrite waits for the table's lock: an open transaction that read it holds it.
                    conn.execute(f"SET lock_timeout = '{int(self.timeout * 1000)}ms'")
                    conn.execute(f"VACUUM (FULL, VERBOSE) {TABLE}")
                except psycopg.Error as exc:
                    raise self._error(exc, "scrub", "", stored=None) from None
                finally:
                    conn.remove_notice_handler(notice)
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("RESET lock_timeout")
            return sum(kept)

        deadline = time.monotonic() + self.timeout
        kept = await anyio.to_thread.run_sync(vacuum)
        while kept and time.monotonic() < deadline:
            await anyio.sleep(0.2)  # for the transaction that still sees them to end
            kept = await anyio.to_thread.run_sync(vacuum)
        if kept:
            raise StorageUnavailableError(
                f"{self.where}: scrub left {kept} deleted rows in the table: an open transaction may still "
                f"see them (for over {self.timeout}s); they stay until a later scrub",
                operation="scrub",
                key="",
                reason="dead row versions cannot be removed yet",
            )

    def _select(self, keys: Sequence[str]) -> dict[str, tuple[bytes, str]]:
        rows = self._query(
            "read",
            keys[0] if keys else "",
            f"SELECT key, data, version FROM {TABLE} WHERE key = ANY(%s)",
            [list(keys)],
        )
        return {key: (bytes(data), version) for key, data, version in rows}

    def _select_keys(
        self, low: str, high: str | None, start_after: str | None, limit: int | None
    ) -> list[str]:
        query, params = f"SELECT key FROM {TABLE} WHERE key >= %s", [low]
        if high is not None:
            query, params = f"{query} AND key < %s", [*params, high]
        if start_after is not None:
            query, params = f"{query} AND key > %s", [*params, start_after]
        query += " ORDER BY key"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        return [key for (key,) in self._query("list", low, query, params)]

    def _select_versions(self, low: str, high: str | None) -> list[tuple[str, str]]:
        query, params = f"SELECT key, version FROM {TABLE} WHERE key >= %s", [low]
        if high is not None:
            query, params = f"{query} AND key < %s", [*params, high]
        return [(key, version) for key, version in self._query("list", low, query + " ORDER BY key", params)]
