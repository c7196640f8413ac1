"""S3-specific behaviour: prefixes, retries of 5xx and timeouts, clear errors when retries run out."""

import boto3
import pytest

from orchestra.errors import StorageUnavailableError
from orchestra.storage import ABSENT, S3Storage, storage_from_uri
from tests.faults import FaultyProxy


async def test_prefix_is_prepended_and_stripped(moto_url, s3_bucket):
    storage = S3Storage(s3_bucket, prefix="production", endpoint_url=moto_url)
    await storage.write("session/a.json", b"{}")
    raw = boto3.client("s3", endpoint_url=moto_url).list_objects_v2(Bucket=s3_bucket)
    assert [o["Key"] for o in raw["Contents"]] == ["production/session/a.json"]
    assert await storage.list("session/") == ["session/a.json"]


async def test_5xx_answers_are_retried(moto_url, s3_bucket):
    with FaultyProxy(moto_url) as proxy:
        storage = S3Storage(s3_bucket, endpoint_url=proxy.url, max_attempts=4)
        proxy.fail_next(2, 503)
        await storage.write("k", b"value")
        proxy.fail_next(3, 500)
        assert (await storage.read("k"))[0] == b"value"


async def test_when_retries_run_out_the_error_is_clear_and_nothing_is_lost(moto_url, s3_bucket):
    with FaultyProxy(moto_url) as proxy:
        storage = S3Storage(s3_bucket, endpoint_url=proxy.url, max_attempts=3)
        await storage.write("k", b"old")
        proxy.fail_next(3, 503)
        with pytest.raises(StorageUnavailableError, match=rf"s3://{s3_bucket}/k failed after every retry"):
            await storage.write("k", b"new")
        assert (await storage.read("k"))[0] == b"old"


async def test_a_timed_out_create_that_landed_is_not_a_false_conflict(moto_url, s3_bucket):
    with FaultyProxy(moto_url) as proxy:
        storage = S3Storage(s3_bucket, endpoint_url=proxy.url, max_attempts=3, timeout=0.5)
        proxy.delay_next(1, 1.5)  # the first PUT lands, but its answer is lost to the timeout
        await storage.write("journal/1", b"record", expect=ABSENT)
        assert (await storage.read("journal/1"))[0] == b"record"


def test_storage_uri_for_s3():
    storage = storage_from_uri(
        "s3://my-bucket/team/sessions?region=eu-west-1&endpoint_url=http://127.0.0.1:9"
    )
    assert isinstance(storage, S3Storage)
    assert storage.bucket == "my-bucket"
    assert storage.prefix == "team/sessions/"
    with pytest.raises(ValueError, match="unknown option"):
        storage_from_uri("s3://b/p?colour=blue")
