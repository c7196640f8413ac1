"""A real PostgreSQL server for the tests: ``.ci/run`` starts one (``.ci/postgres``) and exports its URI as
ORCHESTRA_TEST_POSTGRES. Each test gets a schema of its own, dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest

REQUIRED = bool(os.environ.get("ORCHESTRA_REQUIRE_POSTGRES"))  # .ci/run sets it: there, no server fails


def server_url() -> str:
    """The test server's URI, or a skip (a failure where PostgreSQL is required)."""
    url = os.environ.get("ORCHESTRA_TEST_POSTGRES", "")
    if not url:
        reason = (
            "no PostgreSQL server: set ORCHESTRA_TEST_POSTGRES to one "
            '(eval "$(.ci/postgres start /tmp/orchestra-pg)" starts a throwaway one)'
        )
        if REQUIRED:
            pytest.fail(f"ORCHESTRA_REQUIRE_POSTGRES is set but there is {reason}")
        pytest.skip(reason)
    pytest.importorskip("psycopg", reason="pip install 'orchestra[postgres]' (in .[dev])")
    return url


def in_schema(url: str, schema: str) -> str:
    """``url`` with libpq's ``options`` setting the search path: the storage's table goes in ``schema``."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture
def postgres_uri() -> Iterator[str]:
    """A URI whose storage lives in a fresh schema of the test server (dropped after the test, with
    every storage the test made through ``storage_from_uri``)."""
    import psycopg

    from orchestra.storage import _uri

    url = server_url()
    schema = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    uri = in_schema(url, schema)
    try:
        yield uri
    finally:
        shared = _uri._databases.pop(("postgresql", uri), None)
        if shared is not None:
            shared.close()  # type: ignore[attr-defined]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def postgres_storage(postgres_uri: str) -> Iterator[object]:
    """A ``PostgresStorage`` in a fresh schema."""
    from orchestra.storage import PostgresStorage

    storage = PostgresStorage(postgres_uri)
    try:
        yield storage
    finally:
        storage.close()
