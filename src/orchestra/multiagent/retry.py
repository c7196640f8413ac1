"""Retry policies: re-exported from ``orchestra.retry``, where they live since agents have them too."""

from orchestra.retry import (
    DEFAULT_RETRY,
    NEVER_RETRIED,
    RetryPolicy,
    attempt_note,
    describe_failure,
    error_types,
    run_with_retries,
)

__all__ = [
    "DEFAULT_RETRY",
    "NEVER_RETRIED",
    "RetryPolicy",
    "attempt_note",
    "describe_failure",
    "error_types",
    "run_with_retries",
]
