"""``S3Storage``: one object per key in an S3 bucket, with conditional writes on ETags.

boto3 calls are blocking, so each runs in a worker thread. Create-only writes send ``If-None-Match: *``
and compare-and-swap writes send ``If-Match: <etag>``; S3 answers 412 when the condition fails, which
becomes ``StorageConflictError``. Throttling, 5xx answers and timeouts are retried by botocore's
"standard" retry mode with exponential backoff.

When a write's retries run out, its outcome is not known yet: a request whose answer was lost (a read
timeout, a reset, a 5xx after S3 got the body) may have been carried out. The key is read back: holding
our bytes, the write succeeded; otherwise ``StorageUnavailableError`` says nothing was written; if the
read fails too, ``StorageOutcomeUnknownError`` says so. Missing credentials, a missing bucket or a refused
key are ``StorageConfigurationError``: retrying will not help.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from orchestra.errors import (
    StorageConfigurationError,
    StorageConflictError,
    StorageError,
    StorageOutcomeUnknownError,
    StorageUnavailableError,
)
from orchestra.storage._base import ABSENT, Expect, validate_key
from orchestra.storage._blocking import BlockingStorage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["S3Storage"]

_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
_MISCONFIGURED_CODES = {
    "AccessDenied",
    "AllAccessDisabled",
    "ExpiredToken",
    "InvalidAccessKeyId",
    "InvalidBucketName",
    "InvalidToken",
    "NoSuchBucket",
    "SignatureDoesNotMatch",
    "403",
}
_CONFIG_ERRORS = (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError, NoRegionError)
# Failures where the request never reached S3: a write that failed so was certainly not carried out.
_NOT_SENT = (EndpointConnectionError, ConnectTimeoutError)


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

    def _where(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"

    def _failure(self, operation: str, key: str, exc: Exception) -> StorageError:
        """The error a failed call stands for, by type: misconfiguration or a passing outage."""
        if isinstance(exc, ClientError):
            code = _code(exc)
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            reason = f"{status} {code}: {exc.response.get('Error', {}).get('Message', '')}".strip(": ")
            if code in _MISCONFIGURED_CODES:
                return StorageConfigurationError(
                    f"S3 {operation} of {self._where(key)} was refused: {reason}; check the bucket name, "
                    "the credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE) and their permissions",
                    operation=operation,
                    key=key,
                    reason=reason,
                )
        else:
            reason = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, _CONFIG_ERRORS):
                return StorageConfigurationError(
                    f"S3 {operation} of {self._where(key)} cannot be made: {reason}; set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), and AWS_REGION",
                    operation=operation,
                    key=key,
                    reason=reason,
                )
        done = "nothing was read" if operation in ("read", "list") else "nothing was changed"
        return StorageUnavailableError(
            f"S3 {operation} of {self._where(key)} failed after every retry: {reason}; {done}, try again later",
            operation=operation,
            key=key,
            reason=reason,
        )

    # -- sync implementations (run in worker threads) -------------------------------------------------

    def _read(self, key: str) -> tuple[bytes, str] | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            return response["Body"].read(), response["ETag"]
        except ClientError as exc:
            if _code(exc) in _MISSING_CODES:
                return None
            raise self._failure("read", key, exc) from exc
        except BotoCoreError as exc:
            raise self._failure("read", key, exc) from exc

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
                    + ("it already exists" if expect is ABSENT else f"it is no longer at version {expect}"),
                    operation="write",
                    key=key,
                    reason=code,
                ) from exc
            failure = self._failure("write", key, exc)
        except _NOT_SENT as exc:
            raise self._failure("write", key, exc) from exc
        except BotoCoreError as exc:
            failure = self._failure("write", key, exc)
        if isinstance(failure, StorageConfigurationError):
            raise failure
        return self._read_back(key, data, failure)

    def _read_back(self, key: str, data: bytes, failure: StorageError) -> str:
        """After a write whose answer was lost: did it happen? Our bytes under the key say it did."""
        try:
            current = self._read(key)
        except StorageError as exc:
            raise StorageOutcomeUnknownError(
                f"{failure}; reading it back to learn whether it was written failed too ({exc.reason}): "
                "it may or may not have been written",
                operation="write",
                key=key,
                reason=failure.reason,
            ) from failure
        if current is not None and current[0] == data:
            return current[1]
        raise failure

    def _delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        except (ClientError, BotoCoreError) as exc:
            raise self._failure("delete", key, exc) from exc

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
            raise self._failure("list", prefix, exc) from exc
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
                raise self._failure("delete", what, exc) from exc
            errors = response.get("Errors", [])
            if errors:
                first = errors[0]
                reason = f"{first.get('Code')} {first.get('Message', '')}".strip()
                raise StorageUnavailableError(
                    f"S3 delete of s3://{self.bucket}/{first.get('Key', '')} failed: {reason} "
                    f"({len(errors)} of {len(batch)} keys not deleted)",
                    operation="delete",
                    key=str(first.get("Key", "")),
                    reason=reason,
                )

    async def delete_many(self, keys: Sequence[str]) -> None:
        """One DeleteObjects request per 1,000 keys, instead of a request per key."""
        keys = [validate_key(key) for key in keys]
        await anyio.to_thread.run_sync(self._delete_objects, keys, keys[0] if keys else "")
