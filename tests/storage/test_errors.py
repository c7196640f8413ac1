"""Every storage error names the operation, the key and the reason, and has the type that says what to do:
a full disk, a misconfigured storage and a passing outage each their own (issue 24, point 3)."""

from __future__ import annotations

import os

import anyio
import boto3
import pytest

from orchestra.errors import (
    ConfigurationError,
    StorageConfigurationError,
    StorageFullError,
    StorageOutcomeUnknownError,
    StorageUnavailableError,
)
from orchestra.storage import LocalFileStorage, S3Storage
from tests.faults import FaultyProxy


async def test_a_full_disk_is_storage_full_error_naming_key_and_reason(small_disk):
    storage = LocalFileStorage(small_disk("64k"))

    async def fill() -> None:
        for i in range(100):
            await storage.write(f"a/k{i}", b"x" * 8192)

    with pytest.raises(StorageFullError) as full:
        await fill()
    error = full.value
    assert (error.operation, error.stored) == ("write", False)
    assert error.key.startswith("a/k")
    assert error.reason == "[Errno 28] No space left on device"
    assert error.key in str(error)
    assert isinstance(error, OSError)


async def test_a_read_only_file_system_is_a_configuration_error(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    folder = tmp_path / "ro"
    folder.mkdir()
    await anyio.run_process(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(folder)])
    try:
        with pytest.raises(StorageConfigurationError, match="Read-only file system") as refused:
            await LocalFileStorage(folder).write("a/b", b"x")
        assert isinstance(refused.value, ConfigurationError)  # also a ValueError: retrying will not help
        assert refused.value.key == "a/b"
    finally:
        await anyio.run_process(["umount", str(folder)])


async def test_s3_without_a_bucket_or_credentials_is_a_configuration_error(moto_url, monkeypatch):
    with pytest.raises(StorageConfigurationError, match="NoSuchBucket") as no_bucket:
        await S3Storage("no-such-bucket", endpoint_url=moto_url).write("k", b"x")
    assert no_bucket.value.key == "k"
    assert "s3://no-such-bucket/k" in str(no_bucket.value)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StorageConfigurationError, match="AWS_ACCESS_KEY_ID") as no_credentials:
        await S3Storage("a-bucket", endpoint_url=moto_url, max_attempts=1).read("k")
    assert "NoCredentialsError" in no_credentials.value.reason
    assert "try again later" not in str(no_credentials.value)


async def test_s3_outages_say_whether_anything_was_written(moto_url, s3_bucket):
    with FaultyProxy(moto_url) as proxy:
        storage = S3Storage(s3_bucket, endpoint_url=proxy.url, max_attempts=2)
        proxy.fail_next(2, 503)
        with pytest.raises(StorageUnavailableError, match="nothing was read") as read:
            await storage.read("k")
        assert (read.value.operation, read.value.key) == ("read", "k")
        assert read.value.reason.startswith("503")
        # A write whose answers were all lost, and whose read back fails too: the outcome is not known.
        proxy.lose_next(1, 503)
        proxy.fail_next(3, 503)
        with pytest.raises(StorageOutcomeUnknownError) as unknown:
            await storage.write("k", b"mine")
        assert unknown.value.stored is None
        assert "may or may not have been written" in str(unknown.value)
    assert (
        boto3.client("s3", endpoint_url=moto_url).get_object(Bucket=s3_bucket, Key="k")["Body"].read()
        == b"mine"
    )
