"""``S3Storage``: one object per key in an S3 bucket, with conditional writes on ETags.

boto3 calls are blocking, so each runs in a worker thread. Create-only writes send ``If-None-Match: *``
and compare-and-swap writes send ``If-Match: <etag>``; S3 answers 412 when the condition fails, which
becomes ``StorageConflictError``. Throttling, 5xx answers and timeouts are retried by botocore's
"standard" retry mode with exponential backoff; when the retries run out the call raises
``StorageUnavailableError`` naming the key, and nothing was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from orchestra.errors import StorageConflictError, StorageUnavailableError
from orchestra.storage._base import ABSENT, Expect, validate_key
from orchestra.storage._blocking import BlockingStorage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["S3Storage"]

_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3Storage(BlockingStorage):
    """Storage in an S3 bucket (or any S3-compatible service).

    Args:
        bucket: the bucket name.
        prefix: prepended to every key (e.g. ``"production/"``).
        region_name: the bucket's region.
        boto_session: a boto3 session to build the client from (credentials, profile).
        client: a ready S3 client; the other client arguments are then ignored.
        endpoint_url: an S3-compatible endpoint (MinIO, moto, LocalStack).
        max_attempts: attempts per call, retries included (throttling, 5xx, timeouts).
        timeout: connect and read timeout in seconds.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        region_name: str | None = None,
        boto_session: boto3.Session | None = None,
        client: S3Client | None = None,
        endpoint_url: str | None = None,
        *,
        max_attempts: int = 5,
        timeout: float = 10.0,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else f"{prefix}/"
        if client is None:
            config = Config(
                retries={"total_max_attempts": max_attempts, "mode": "standard"},
                connect_timeout=timeout,
                read_timeout=timeout,
            )
            session = boto_session or boto3.Session()
            client = session.client("s3", region_name=region_name, endpoint_url=endpoint_url, config=config)
        self.client: S3Client = client

    def __repr__(self) -> str:
        return f"S3Storage(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def _unavailable(self, action: str, key: str, exc: Exception) -> StorageUnavailableError:
        return StorageUnavailableError(
            f"S3 {action} of s3://{self.bucket}/{self.prefix}{key} failed after every retry: {exc}; "
            "nothing was changed, try again later"
        )

    # -- sync implementations (run in worker threads) -------------------------------------------------

    def _read(self, key: str) -> tuple[bytes, str] | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            return response["Body"].read(), response["ETag"]
        except ClientError as exc:
            if _code(exc) in _MISSING_CODES:
                return None
            raise self._unavailable("read", key, exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable("read", key, exc) from exc

    def _write(self, key: str, data: bytes, expect: Expect) -> str:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self.prefix + key, "Body": data}
        if expect is ABSENT:
            kwargs["IfNoneMatch"] = "*"
        elif isinstance(expect, str):
            kwargs["IfMatch"] = expect
        try:
            return self.client.put_object(**kwargs)["ETag"]
        except ClientError as exc:
            code = _code(exc)
            if code in _CONFLICT_CODES or (isinstance(expect, str) and code in _MISSING_CODES):
                # A retried request whose first attempt landed (the answer was lost to a timeout) fails
                # its own condition; if the object holds exactly our bytes, our write did succeed.
                retried = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) > 0
                current = self._read(key) if retried else None
                if current is not None and current[0] == data:
                    return current[1]
                what = "create" if expect is ABSENT else "update"
                raise StorageConflictError(
                    f"cannot {what} {key!r}: "
                    + ("it already exists" if expect is ABSENT else f"it is no longer at version {expect}")
                ) from exc
            raise self._unavailable("write", key, exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable("write", key, exc) from exc

    def _delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("delete", key, exc) from exc

    def _list(self, prefix: str, start_after: str | None, limit: int | None) -> list[str]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
        if start_after is not None:
            kwargs["StartAfter"] = self.prefix + start_after
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
                for item in page.get("Contents", []):
                    keys.append(item["Key"][len(self.prefix) :])
                    if limit is not None and len(keys) >= limit:
                        return keys
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("list", prefix, exc) from exc
        return keys

    def _delete_prefix(self, prefix: str) -> int:
        keys = self._list(prefix, None, None)
        self._delete_objects(keys, prefix)
        return len(keys)

    def _delete_objects(self, keys: Sequence[str], what: str) -> None:
        """DeleteObjects, 1,000 keys a request (S3's limit); a key S3 could not delete fails the call."""
        for start in range(0, len(keys), 1000):
            batch = [{"Key": self.prefix + k} for k in keys[start : start + 1000]]
            try:
                response = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": batch, "Quiet": True},  # type: ignore[typeddict-item]
                )
            except (ClientError, BotoCoreError) as exc:
                raise self._unavailable("delete", what, exc) from exc
            errors = response.get("Errors", [])
            if errors:
                first = errors[0]
                raise StorageUnavailableError(
                    f"S3 delete of s3://{self.bucket}/{first.get('Key', '')} failed: {first.get('Code')} "
                    f"{first.get('Message', '')} ({len(errors)} of {len(batch)} keys not deleted)"
                )

    async def delete_many(self, keys: Sequence[str]) -> None:
        """One DeleteObjects request per 1,000 keys, instead of a request per key."""
        keys = [validate_key(key) for key in keys]
        await anyio.to_thread.run_sync(self._delete_objects, keys, keys[0] if keys else "")
