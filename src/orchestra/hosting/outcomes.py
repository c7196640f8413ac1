"""How the outcome of a hosted run is answered, decided by the error's type, never its text: a status
(HTTP's numbers: the run record keeps it, so a repeat is answered alike), a stable code and a message.

| outcome | status | code | stored |
| --- | --- | --- | --- |
| completed, or interrupted for a human | 200 | | yes |
| another writer saved the session first | 409 | ``session_conflict`` | no |
| a full disk or quota | 507 | ``storage_full`` | no |
| the storage kept failing (a passing outage) | 503 | ``storage_unavailable`` | no |
| the storage lost an answer and could not tell | 503 | ``outcome_unknown`` | not known |
| the storage is misconfigured | 500 | ``storage_misconfigured`` | no |
| a stored session is damaged | 500 | ``session_damaged`` | no |
| ``POST .../resume`` with nothing to resume | 409 | ``nothing_to_resume`` | no |
| the model or a tool failed | 502 | ``run_failed`` | no (an agent's turn is rolled back) |
| answers to interrupts that are not open | 404 / 409 | ``unknown_interrupt``, ``interrupt_already_answered`` | no (nothing ran) |
| stopped by a newer message, turn discarded | 409 | ``run_rolled_back`` | no |

``stored`` is whether the turn is in the session. A request repeated with its ``Idempotency-Key`` gets
the first answer again when the turn was stored, and runs it again when it was not.

A request that hosting refuses before anything runs raises a ``Refused`` (a busy session, a key used for
another body, answers to questions nobody asked, a run that cannot be resumed, a webhook it may not
call): its status, code and message are the whole answer, so the server maps every one the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestra.errors import (
    OrchestraError,
    SessionConflictError,
    SnapshotError,
    StorageConfigurationError,
    StorageError,
    StorageFullError,
    StorageOutcomeUnknownError,
    StorageUnavailableError,
)

if TYPE_CHECKING:
    from orchestra.hosting.records import RunRecord

__all__ = ["Failure", "NothingToResume", "Refused", "failure_of", "recorded_failure", "terminal_event"]


class Refused(Exception):
    """A request refused before anything ran: ``status`` (4xx), a stable ``code``, and a message that says
    what to do; ``retry_after`` (seconds) when sending it again later may succeed."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class NothingToResume(OrchestraError):
    """``POST .../resume`` on a session with no open turn and no unfinished run (409)."""


@dataclass(frozen=True)
class Failure:
    """The HTTP answer a failed run gets."""

    status: int
    code: str
    message: str
    retry_after: float | None = None
    stored: bool | None = False
    internal: bool = False  # the message says what failed, but details stay in the server's log


def failure_of(exc: BaseException, run_id: str) -> Failure:
    """The answer for a run that ended with ``exc`` (see the module docstring)."""
    stored = getattr(exc, "stored", False)
    if isinstance(exc, Refused):
        return Failure(exc.status, exc.code, exc.message, retry_after=exc.retry_after)
    if isinstance(exc, SessionConflictError):
        return Failure(409, "session_conflict", str(exc), retry_after=1)
    if isinstance(exc, NothingToResume):
        return Failure(409, "nothing_to_resume", str(exc))
    if isinstance(exc, StorageFullError):
        return Failure(
            507,
            "storage_full",
            f"the server's storage is full, so the turn was not stored (run {run_id}); try again once an "
            "operator has freed space",
            stored=stored,
        )
    if isinstance(exc, StorageOutcomeUnknownError):
        return Failure(
            503,
            "outcome_unknown",
            f"the storage lost the answer to the turn's save, so it may or may not have been stored (run "
            f"{run_id}); repeat the request with the same Idempotency-Key to get its outcome",
            retry_after=1,
            stored=None,
        )
    if isinstance(exc, StorageUnavailableError):
        return Failure(
            503,
            "storage_unavailable",
            f"the server's storage is unavailable, so the turn was not stored (run {run_id}); try again",
            retry_after=1,
            stored=stored,
        )
    if isinstance(exc, StorageConfigurationError):
        return Failure(
            500,
            "storage_misconfigured",
            f"the server's storage is misconfigured (run {run_id}); an operator must fix it",
            internal=True,
        )
    if isinstance(exc, StorageError):
        message = f"the server's storage failed, and the turn was {_stored_text(stored)} (run {run_id})"
        return Failure(500, "storage_failed", message, stored=stored, internal=True)
    if isinstance(exc, SnapshotError):
        return Failure(
            500,
            "session_damaged",
            f"the stored session could not be read (run {run_id}); an operator must restore it",
            internal=True,
        )
    if isinstance(exc, OrchestraError):
        return Failure(502, "run_failed", f"{exc} (run {run_id})", stored=stored)
    # A custom model or tool raised: the run failed (and is recorded), the server did not.
    return Failure(502, "run_failed", f"the run failed: {type(exc).__name__} (details in run {run_id})")


def _stored_text(stored: bool | None) -> str:
    return "stored" if stored else "not stored" if stored is False else "perhaps stored"


def recorded_failure(record: RunRecord) -> Failure | None:
    """How a recorded run was answered, to answer a repeat (or a follower) the same way."""
    if record.http_status in (None, 200):
        return None
    return Failure(record.http_status, record.error_code or "run_failed", record.error or "the run failed")


def terminal_event(record: RunRecord, failure: Failure | None) -> tuple[str, Any]:
    """A run's last event: ``result`` (the answer) or ``error`` (what a plain request would get)."""
    if failure is None:
        return "result", record.answer()
    message = record.error if failure.code == "run_failed" and record.error else failure.message
    detail: dict[str, Any] = {"code": failure.code, "message": message}
    if failure.retry_after is not None:
        detail["retry_after"] = failure.retry_after
    return "error", {"error": detail, "run_id": record.run_id, "status": record.status}
