"""Storages for the tests in this folder: every backend (SQLite and a real PostgreSQL server included),
and each through ``EncryptedStorage``, run the conformance suite."""

from __future__ import annotations

import base64

import pytest

from tests.conftest import build_storage

KEY = base64.b64encode(bytes(range(32))).decode()

KINDS = ["memory", "local", "s3", "prefixed", "sqlite", "postgres"]
ENCRYPTED = ["encrypted-local", "encrypted-s3", "encrypted-sqlite", "encrypted-postgres"]


def build(kind: str, request: pytest.FixtureRequest, tmp_path, moto_url: str):
    from orchestra.storage import SQLiteStorage

    if kind == "sqlite":
        return SQLiteStorage(tmp_path / "store.db")
    if kind == "postgres":
        return request.getfixturevalue("postgres_storage")
    return build_storage(kind, request, tmp_path, moto_url)


@pytest.fixture(params=KINDS + ENCRYPTED)
def storage(request: pytest.FixtureRequest, tmp_path, moto_url: str, monkeypatch: pytest.MonkeyPatch):
    from orchestra.storage import EncryptedStorage, EnvKeyProvider

    kind = request.param
    if not kind.startswith("encrypted-"):
        return build(kind, request, tmp_path, moto_url)
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={KEY}")
    return EncryptedStorage(
        build(kind.removeprefix("encrypted-"), request, tmp_path, moto_url), EnvKeyProvider()
    )
