"""What the benchmarks need for the database storages: a fresh one to run on, and its floor.

``database(kind)`` gives a fresh ``SQLiteStorage`` (a new file) or ``PostgresStorage`` (a new schema on the
server named by ORCHESTRA_BENCH_POSTGRES or ORCHESTRA_TEST_POSTGRES; ``.ci/postgres start DIR`` starts
one). ``commit_floor`` is what the database itself costs for ``count`` durable commits of one row of
``size`` bytes each, made with the driver alone (sqlite3; psycopg): no framework, no group commit.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

KINDS = ("sqlite", "postgres")


def postgres_url() -> str:
    url = os.environ.get("ORCHESTRA_BENCH_POSTGRES") or os.environ.get("ORCHESTRA_TEST_POSTGRES")
    if not url:
        raise SystemExit(
            "set ORCHESTRA_BENCH_POSTGRES to a PostgreSQL server "
            '(eval "$(.ci/postgres start /tmp/orchestra-pg)" starts a throwaway one)'
        )
    return url


@contextlib.contextmanager
def database(kind: str) -> Iterator[tuple[Any, str]]:
    """``(storage, where)``: a fresh storage of ``kind``, and the file or URI it lives in."""
    if kind == "sqlite":
        from orchestra.storage import SQLiteStorage

        with tempfile.TemporaryDirectory() as root:
            path = os.path.join(root, "bench.db")
            storage = SQLiteStorage(path)
            try:
                yield storage, path
            finally:
                storage.close()
        return
    import psycopg

    from orchestra.storage import PostgresStorage

    url = postgres_url()
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in url else "?"
    uri = f"{url}{separator}options={quote(f'-csearch_path={schema}')}"
    storage = PostgresStorage(uri)
    try:
        yield storage, uri
    finally:
        storage.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def commit_floor(kind: str, count: int, size: int) -> float:
    """Seconds for ``count`` transactions of one ``INSERT`` of ``size`` bytes, each committed durably
    (SQLite: WAL, synchronous=FULL; PostgreSQL: the server's own synchronous_commit), by the driver alone."""
    payload = os.urandom(size)
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as root:
            conn = sqlite3.connect(os.path.join(root, "floor.db"), isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("CREATE TABLE t (key TEXT PRIMARY KEY, data BLOB NOT NULL, version TEXT NOT NULL)")
            started = time.perf_counter()
            for i in range(count):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO t VALUES (?, ?, ?)", (f"k{i}", payload, "v"))
                conn.execute("COMMIT")
            seconds = time.perf_counter() - started
            conn.close()
            return seconds
    import psycopg

    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (key text PRIMARY KEY, data bytea, version text)"
        )
        conn.execute("TRUNCATE bench_floor")
        started = time.perf_counter()
        for i in range(count):
            conn.execute("INSERT INTO bench_floor VALUES (%s, %s, %s)", (f"k{i}", payload, "v"))
        seconds = time.perf_counter() - started
        conn.execute("DROP TABLE bench_floor")
        return seconds
