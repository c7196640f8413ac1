"""Erasure you can check: after ``forget``, the raw storage holds not one byte of a forgotten value and
no key names the forgotten namespace.

What each test reads, and what it cannot see:
- local files: every file and every name under the root (not the disk's freed blocks);
- SQLite: the database file, its ``-wal`` and ``-shm`` as bytes, while the storage is still open (so
  the scrub, not a clean close, did the work);
- PostgreSQL: the table's heap pages, its primary key index pages and its TOAST pages, raw, through
  ``pageinspect`` (dead tuples included), and the rows through SQL. Not the server's write-ahead log,
  replicas or backups, which keep the rows until they roll over (docs/memory.md says so).
Each test first sees the secret in the raw bytes, so it can fail.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

import anyio
import pytest

from orchestra.memory import MemoryStore
from orchestra.storage import EncryptedStorage, EnvKeyProvider, scrub
from orchestra.testing import HashEmbedder
from tests.memory.conftest import BACKENDS, make_storage

LABEL = "forgottenuser" + secrets.token_hex(4)
SECRET = "secret-" + secrets.token_hex(8)


def values() -> list[dict]:
    """Small values, and one too big for a PostgreSQL page (stored out of line, uncompressible)."""
    return [
        {"text": f"{SECRET} likes green tea", "n": 1},
        {"text": f"{SECRET} drives a blue car", "n": 2},
        {"text": "big", "blob": SECRET + secrets.token_hex(3000)},
    ]


def raw_sqlite(path: Path) -> bytes:
    return b"".join(
        Path(f"{path}{suffix}").read_bytes()
        for suffix in ("", "-wal", "-shm")
        if Path(f"{path}{suffix}").exists()
    )


def raw_files(root: Path) -> bytes:
    out = []
    for folder, dirs, files in os.walk(root):
        out.extend(name.encode() for name in dirs + files)
        out.extend((Path(folder) / name).read_bytes() for name in files)
    return b"\n".join(out)


def raw_postgres(storage) -> bytes:
    import psycopg

    out = []
    with psycopg.connect(storage.conninfo, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect SCHEMA public")
        toast = conn.execute(
            "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'orchestra_storage'::regclass"
        ).fetchone()[0]
        for relation in ["orchestra_storage", "orchestra_storage_pkey", toast]:
            pages = conn.execute("SELECT pg_relation_size(%s::regclass) / 8192", (relation,)).fetchone()[0]
            for page in range(pages):
                out.append(
                    bytes(conn.execute("SELECT public.get_raw_page(%s, %s)", (relation, page)).fetchone()[0])
                )
        for key, data in conn.execute("SELECT key, data FROM orchestra_storage"):
            out.extend((key.encode(), bytes(data)))
    return b"".join(out)


def raw(kind: str, storage, tmp_path: Path) -> bytes:
    if kind == "local":
        return raw_files(tmp_path / "files")
    if kind == "sqlite":
        return raw_sqlite(tmp_path / "memory.db")
    return raw_postgres(storage)


@pytest.mark.parametrize("kind", [b for b in BACKENDS if b != "memory"])
def test_forget_leaves_no_byte_of_a_value_and_no_name_of_the_namespace(kind, request, tmp_path) -> None:
    storage = make_storage(kind, request, tmp_path)
    store = MemoryStore(storage, embedder=HashEmbedder())
    keep = ("users", "keeper")
    gone = ("users", LABEL)
    for n, value in enumerate(values()):
        store.put((*gone, "notes"), f"k{n}", value)
        store.put(gone, f"k{n}", value)
        # Overwritten versions leave old bytes behind in databases unless they are scrubbed too.
        store.put(gone, f"k{n}", {**value, "n": n + 10})
        store.put(keep, f"k{n}", {"text": f"kept {n}"})
    v = store.put(gone, "tomb", {"text": SECRET})
    store.delete(gone, "tomb", expect=v)  # a tombstone, whose key names the namespace
    anyio.run(scrub, storage)  # SQLite: the items reach the database file itself, not only its log
    before = raw(kind, storage, tmp_path)
    assert SECRET.encode() in before
    assert LABEL.encode() in before

    assert store.forget(gone) == 7
    after = raw(kind, storage, tmp_path)
    assert SECRET.encode() not in after, f"{kind}: a forgotten value is still in the raw storage"
    assert LABEL.encode() not in after, f"{kind}: something still names the forgotten namespace"
    assert b"kept 2" in after  # the rest is still there, readable
    assert sorted(i.key for i in store.search(keep, limit=10)) == ["k0", "k1", "k2"]
    close = getattr(storage, "close", None)
    if kind == "sqlite" and close is not None:
        close()


def test_encrypted_storage_keeps_values_and_vectors_unreadable(tmp_path, monkeypatch) -> None:
    from orchestra.storage import SQLiteStorage

    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", "k1=" + base64.b64encode(os.urandom(32)).decode())
    inner = SQLiteStorage(tmp_path / "memory.db")
    store = MemoryStore(EncryptedStorage(inner, EnvKeyProvider()), embedder=HashEmbedder())
    store.put(("users", "u1"), "k", {"text": f"{SECRET} likes green tea"})
    assert store.get(("users", "u1"), "k").value["text"].startswith(SECRET)  # type: ignore[union-attr]
    assert [i.key for i in store.search(("users",), query="green tea")] == ["k"]
    data = raw_sqlite(tmp_path / "memory.db")
    assert SECRET.encode() not in data
    assert b"green tea" not in data
    assert b'"vector"' not in data  # the vector is inside the ciphertext too
    assert b"memory/items/users/u1/~/k" in data  # keys are not encrypted: the docs say so
    inner.close()


def test_vectors_can_stay_out_of_storage(tmp_path) -> None:
    from orchestra.storage import LocalFileStorage

    embedder = HashEmbedder()
    store = MemoryStore(LocalFileStorage(tmp_path), embedder=embedder, store_vectors=False)
    store.put(("u",), "tea", {"text": "likes green tea"})
    store.put(("u",), "car", {"text": "drives a blue car"})
    assert b'"vector"' not in raw_files(tmp_path)
    assert [i.key for i in store.search(("u",), query="green tea", limit=1)] == ["tea"]
    with_vectors = MemoryStore(LocalFileStorage(tmp_path / "v"), embedder=embedder)
    with_vectors.put(("u",), "tea", {"text": "likes green tea"})
    assert b'"vector"' in raw_files(tmp_path / "v")


def test_postgres_scrub_says_when_an_open_transaction_keeps_deleted_rows(postgres_uri) -> None:
    import psycopg

    from orchestra.errors import StorageUnavailableError
    from orchestra.storage import PostgresStorage

    storage = PostgresStorage(postgres_uri, timeout=1.0)
    store = MemoryStore(storage)
    store.put(("users", LABEL), "k", {"text": SECRET})
    with psycopg.connect(postgres_uri) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT 1").fetchone()  # a snapshot that sees the row (no lock on the table)
        with pytest.raises(StorageUnavailableError, match="scrub left 1 deleted rows"):
            store.forget(("users", LABEL))
        assert store.get(("users", LABEL), "k") is None  # deleted all the same
        assert SECRET.encode() in raw_postgres(storage)  # and still in the pages, as the error said
        reader.rollback()
    anyio.run(scrub, storage)
    assert SECRET.encode() not in raw_postgres(storage)
    storage.close()


def test_postgres_scrub_waits_for_the_tables_lock_no_longer_than_its_timeout(postgres_uri) -> None:
    import psycopg

    from orchestra.errors import StorageUnavailableError
    from orchestra.storage import PostgresStorage

    storage = PostgresStorage(postgres_uri, timeout=1.0)
    store = MemoryStore(storage)
    store.put(("users", LABEL), "k", {"text": SECRET})
    with psycopg.connect(postgres_uri) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM orchestra_storage").fetchone()  # holds a lock on the table
        with pytest.raises(StorageUnavailableError, match="scrub"):
            store.forget(("users", LABEL))
        reader.rollback()
    assert store.forget(("users", LABEL)) == 0
    assert SECRET.encode() not in raw_postgres(storage)
    storage.close()
