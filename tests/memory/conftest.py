"""The four backends every memory test runs on: in memory, local files, SQLite and a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

BACKENDS = ["memory", "local", "sqlite", "postgres"]


def make_storage(kind: str, request: pytest.FixtureRequest, tmp_path):
    from orchestra.storage import InMemoryStorage, LocalFileStorage, SQLiteStorage

    if kind == "memory":
        return InMemoryStorage()
    if kind == "local":
        return LocalFileStorage(tmp_path / "files")
    if kind == "sqlite":
        return SQLiteStorage(tmp_path / "memory.db")
    return request.getfixturevalue("postgres_storage")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[str, object]]:
    """(kind, storage) for each backend."""
    storage = make_storage(request.param, request, tmp_path)
    yield request.param, storage
    close = getattr(storage, "close", None)
    if close is not None and request.param == "sqlite":
        close()


@pytest.fixture
def storage(backend):
    return backend[1]
