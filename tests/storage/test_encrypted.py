"""EncryptedStorage: sessions encrypted at rest with keys from the environment or from AWS KMS (moto's
server), keys that rotate, and values that refuse to decrypt when tampered with or moved."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import boto3
import pytest

from orchestra import Agent
from orchestra.errors import ConfigurationError, StorageError
from orchestra.session import SnapshotSessionManager
from orchestra.storage import EncryptedStorage, EnvKeyProvider, KMSKeyProvider, LocalFileStorage, S3Storage
from orchestra.testing import ScriptedModel

SECRET = "my passport number is X1234567"


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def files_under(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in root.rglob("*") if p.is_file()]


def chat(storage, replies=("noted",)):
    return Agent(
        model=ScriptedModel(list(replies)), session_manager=SnapshotSessionManager("s1", storage=storage)
    )


def test_a_session_on_local_files_is_unreadable_on_disk_and_loads_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={key()}")
    storage = EncryptedStorage(LocalFileStorage(tmp_path), EnvKeyProvider())
    agent = chat(storage)
    agent(SECRET)
    stored = files_under(tmp_path)
    assert stored
    assert not [data for data in stored if b"X1234567" in data or b"passport" in data]
    assert chat(storage).messages == agent.messages


def test_keys_rotate_old_values_stay_readable_and_a_missing_key_is_named(tmp_path, monkeypatch):
    old, new = key(), key()
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={old}")
    inner = LocalFileStorage(tmp_path)
    agent = chat(EncryptedStorage(inner, EnvKeyProvider()), ["one", "two"])
    agent("first")

    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k2={new},k1={old}")  # k2 is current, k1 still reads
    rotated = chat(EncryptedStorage(inner, EnvKeyProvider()), ["two"])
    assert rotated.messages == agent.messages
    rotated("second")
    newest = max((p for p in tmp_path.rglob("*.json")), key=lambda p: p.stat().st_mtime_ns)
    assert b"env:k2" in newest.read_bytes()

    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k2={new}")
    with pytest.raises(
        StorageError, match="encrypted with key 'k1', which is not among this provider's keys"
    ):
        chat(EncryptedStorage(inner, EnvKeyProvider()))


async def test_a_tampered_or_moved_value_does_not_decrypt(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={key()}")
    inner = LocalFileStorage(tmp_path)
    storage = EncryptedStorage(inner, EnvKeyProvider())
    await storage.write("a.json", b'{"balance": 10}')
    blob, _ = await inner.read("a.json")
    await inner.write("b.json", blob)  # a valid value, under another key
    with pytest.raises(StorageError, match="b.json: the encrypted value does not decrypt"):
        await storage.read("b.json")
    await inner.write("a.json", blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(StorageError, match="a.json: the encrypted value does not decrypt"):
        await storage.read("a.json")
    await inner.write("plain.json", b"{}")
    with pytest.raises(StorageError, match="plain.json: not an encrypted value"):
        await storage.read("plain.json")


# A fixed key (not key()): under pytest-xdist every worker must collect the same test ids.
@pytest.mark.parametrize("value", ["", "k1", "k1=c2hvcnQ=", "=" + base64.b64encode(bytes(32)).decode()])
def test_a_malformed_key_variable_is_named_without_showing_a_key(monkeypatch, value):
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", value)
    with pytest.raises(ConfigurationError, match="ORCHESTRA_ENCRYPTION_KEYS") as refused:
        EnvKeyProvider()
    assert "c2hvcnQ" not in str(refused.value)


def test_kms_envelope_encryption_on_s3(moto_url, s3_bucket):
    kms = boto3.client("kms", endpoint_url=moto_url, region_name="us-east-1")
    key_id = kms.create_key(Description="orchestra sessions")["KeyMetadata"]["KeyId"]
    s3 = S3Storage(s3_bucket, prefix="enc", endpoint_url=moto_url)

    def storage():  # a new provider is what a new process has: it must decrypt data keys through KMS
        return EncryptedStorage(s3, KMSKeyProvider(key_id, endpoint_url=moto_url, region_name="us-east-1"))

    agent = chat(storage())
    agent(SECRET)
    client = boto3.client("s3", endpoint_url=moto_url)
    objects = client.list_objects_v2(Bucket=s3_bucket)["Contents"]
    bodies = [client.get_object(Bucket=s3_bucket, Key=o["Key"])["Body"].read() for o in objects]
    assert bodies
    assert not [b for b in bodies if b"X1234567" in b]
    assert all(b.startswith(b"ORCHENC1") for b in bodies)
    assert chat(storage()).messages == agent.messages

    latest = next(o["Key"] for o in objects if o["Key"].endswith("snapshot_latest.json"))
    blob = bytearray(client.get_object(Bucket=s3_bucket, Key=latest)["Body"].read())
    blob[len(b"ORCHENC1") + 2 + len(b"kms:") + 40] ^= 0xFF  # inside the KMS-encrypted data key
    client.put_object(Bucket=s3_bucket, Key=latest, Body=bytes(blob))
    with pytest.raises(StorageError, match="KMS could not decrypt the value's data key"):
        chat(storage())


def test_a_key_id_given_twice_is_refused(monkeypatch):
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={key()},k1={key()}")
    with pytest.raises(ConfigurationError, match="key id 'k1' is given twice \\(entries 1 and 2\\)"):
        EnvKeyProvider()


async def test_a_wrong_key_under_the_same_id_is_named(tmp_path, monkeypatch):
    inner = LocalFileStorage(tmp_path)
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={key()}")
    await EncryptedStorage(inner, EnvKeyProvider()).write("a.json", b"{}")
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={key()}")  # another key, the same id
    with pytest.raises(StorageError, match="a.json: the encrypted value does not decrypt with key 'k1'"):
        await EncryptedStorage(inner, EnvKeyProvider()).read("a.json")
