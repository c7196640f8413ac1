"""The conformance suite also runs through ``EncryptedStorage`` (over local files and over S3)."""

from __future__ import annotations

import base64

import pytest

from tests.conftest import build_storage

KEY = base64.b64encode(bytes(range(32))).decode()


@pytest.fixture(params=["memory", "local", "s3", "prefixed", "encrypted-local", "encrypted-s3"])
def storage(request: pytest.FixtureRequest, tmp_path, moto_url: str, monkeypatch: pytest.MonkeyPatch):
    from orchestra.storage import EncryptedStorage, EnvKeyProvider

    kind = request.param
    if not kind.startswith("encrypted-"):
        return build_storage(kind, request, tmp_path, moto_url)
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={KEY}")
    return EncryptedStorage(
        build_storage(kind.removeprefix("encrypted-"), request, tmp_path, moto_url), EnvKeyProvider()
    )
