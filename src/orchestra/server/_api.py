"""What every API route shares: errors and how they are answered, the bearer key, id checks, and the
request and answer models of the invoke and run routes."""

from __future__ import annotations

import contextvars
import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Path, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from starlette.background import BackgroundTask

from orchestra._ids import validate_id
from orchestra._json import dumps
from orchestra._logging import get_logger
from orchestra.hosting.identity import Identity
from orchestra.hosting.outcomes import Failure
from orchestra.hosting.records import RunRecord, RunSummary
from orchestra.server.auth import Authenticator, AuthRefused

if TYPE_CHECKING:
    from orchestra.hosting import RunService

log = get_logger("orchestra.server")


def _check_storable(text: str, field: str) -> None:
    """Text that cannot be stored (a lone surrogate is not UTF-8) is refused before the model is called."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(
            422, "invalid_text", f"{field} holds a character that is not valid Unicode text at {exc.start}"
        ) from None


def checked_id(value: str | None, field: str) -> str | None:
    """An id from a path or a query, by the storage's own rules: 422 naming the field, before any work."""
    if value is None:
        return None
    try:
        return validate_id(value, field)
    except ValueError as exc:
        raise ApiError(422, f"invalid_{field}", str(exc)) from None


class ApiError(Exception):
    """An error answered as ``{"error": {"code", "message"}}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


STORABLE_ID = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"

# A server-sent event, as the OpenAPI document describes a text/event-stream answer: each event (what
# schemathesis validates one by one), with its JSON payload in ``data``.
SSE_EVENTS = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
            "required": ["data"],
        }
    }
}
"""The storage's id rule as a JSON Schema pattern (the same as ``validate_id``), so the API document
and the server agree on which ids are valid."""


_REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("orchestra_request_id", default="-")
_LOGGED = {401: "auth_refused", 409: "session_conflict"}  # plus every 5xx (a 409 only for that code)


def _error(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    background: BackgroundTask | None = None,
) -> JSONResponse:
    """An error answer; it carries the request id, and refusals worth an operator's eye are logged with it."""
    request_id = _REQUEST_ID.get()
    if (status in _LOGGED and (status != 409 or code == "session_conflict")) or status >= 500:
        event = _LOGGED.get(status, "request_failed")
        (log.error if status == 500 else log.warning)(event, status=status, code=code, request_id=request_id)
    body = {"error": {"code": code, "message": message, "request_id": request_id}}
    return JSONResponse(body, status_code=status, headers=headers, background=background)


class InterruptAnswer(BaseModel):
    """The answer to one open interrupt."""

    model_config = ConfigDict(extra="forbid")

    interrupt_id: str = Field(
        min_length=1, max_length=200, description="The id the interrupt was asked with."
    )
    response: Any = Field(default=None, description="The answer (any JSON).")


OnBusyField = Field(
    default=None,
    description="What this message does if the session is running another run: reject (409), enqueue, "
    "interrupt (stop it, keep its completed work) or rollback (stop it, discard its turn). Default: the "
    "agent's, else the server's (runs.on_busy).",
)


class HistoryTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str


_METADATA_KEY = r"^[A-Za-z0-9_.-]{1,64}$"
Metadata = Annotated[
    dict[Annotated[str, Field(pattern=_METADATA_KEY)], Annotated[str, Field(max_length=512)]],
    Field(max_length=32),
    # The document says no other key is allowed (pydantic's own schema would allow any other key).
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": 32,
            "patternProperties": {_METADATA_KEY: {"type": "string", "maxLength": 512}},
            "additionalProperties": False,
        }
    ),
]


class InvokeRequest(BaseModel):
    """Invoke a hosted agent. Give ``session_id`` (session mode), ``history`` (stateless), or neither."""

    model_config = ConfigDict(extra="forbid")

    input: Any = Field(
        default=None,
        description='What to do: a string, or an object such as {"message": "..."} (not with responses).',
    )
    session_id: str | None = Field(
        default=None, pattern=STORABLE_ID, description="Session mode: the server keeps the history."
    )

    @field_validator("session_id")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        # The storage's own rule (no leading dot, matched in full), checked before any work.
        return None if value is None else validate_id(value, "session_id")

    history: list[HistoryTurn] | None = Field(
        default=None, description="Stateless mode: the conversation so far."
    )
    responses: list[InterruptAnswer] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Answers to the session's open interrupts, by id (session mode; instead of input).",
    )
    on_busy: Literal["reject", "enqueue", "interrupt", "rollback"] | None = OnBusyField
    metadata: Metadata | None = Field(
        default=None,
        description="Kept in the run's record, to search runs by (GET /api/v1/runs?metadata=key:value); "
        "keys are 1-64 letters, digits, '_', '.' or '-'.",
    )


class AgentInfo(BaseModel):
    id: str
    kind: str = Field(description="agent, graph or swarm")
    description: str | None = None


class AgentList(BaseModel):
    agents: list[AgentInfo]


class SessionSummary(BaseModel):
    session_id: str
    updated_at: str | None = Field(description="When it was last saved (ISO 8601), if known.")


class SessionList(BaseModel):
    sessions: list[SessionSummary]


class SessionDetail(BaseModel):
    session_id: str
    agent_id: str
    messages: list[dict[str, Any]] | None = Field(
        default=None,
        description="An agent's whole conversation, every turn, also those its conversation manager no "
        "longer gives the model.",
    )
    context_start: int | None = Field(
        default=None,
        description="Where what the model is given starts in messages (messages[context_start:]).",
    )
    state: dict[str, Any] | None = Field(default=None, description="An agent's state.")
    run: dict[str, Any] | None = Field(default=None, description="A pipeline's run: status, task, nodes.")
    nodes: dict[str, list[dict[str, Any]]] | None = Field(
        default=None, description="A pipeline's agent nodes' conversations."
    )


class RunList(BaseModel):
    runs: list[RunSummary]
    next_cursor: str | None = Field(
        default=None, description="Pass as cursor for the next page (none: this is the last)."
    )


class RunRequest(InvokeRequest):
    """Start a background run: as invoke, plus a webhook called once when the run ends."""

    webhook: str | None = Field(
        default=None,
        max_length=2048,
        description="An http(s) URL called once when the run ends, signed with HMAC-SHA256 (Standard Webhooks).",
    )


class InvokeResponse(BaseModel):
    output: Any
    session_id: str | None
    run_id: str
    usage: dict[str, int]
    status: str = Field(description="completed, or interrupted (waiting on `interrupts`, or `stopped`).")
    resumed: bool = False
    interrupts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="An interrupted run's open questions: id, name, reason, node, tool, tool_use_id.",
    )
    stopped: dict[str, Any] | None = Field(
        default=None, description="Set when the run was stopped: by (cancel, interrupt, rollback), run_id."
    )


_BEARER = HTTPBearer(
    auto_error=False, description="An API key of a workspace: `Authorization: Bearer <key>`."
)


async def caller_of(request: Request) -> Identity:
    """The request's caller (``Authenticator.identify``), made the caller of what it runs; a refusal is an
    ``ApiError`` with its status and the code naming the rule."""
    authenticator: Authenticator = request.app.state.auth
    try:
        return await authenticator.identify(request.headers)
    except AuthRefused as exc:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        if exc.status == 429:
            headers["Retry-After"] = "1"
        raise ApiError(exc.status, exc.code, exc.message, headers) from None


async def workspace(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)] = None
) -> str:
    """The caller's workspace, from ``Authorization: Bearer <key or JWT>`` (401 without a valid one)."""
    return (await caller_of(request)).workspace


class _CallerKey(HTTPBearer):
    """The bearer scheme as the OpenAPI document declares it, and the caller's check itself: one dependency
    where ``workspace`` is two (HTTPBearer's own parse of the header, then the check), a level FastAPI
    solves on every request."""

    async def __call__(self, request: Request) -> Identity:  # type: ignore[override]
        return await caller_of(request)


class _WorkspaceKey(HTTPBearer):
    """As ``_CallerKey``, answering the caller's workspace."""

    async def __call__(self, request: Request) -> str:  # type: ignore[override]
        return (await caller_of(request)).workspace


_SCHEME = {
    "auto_error": False,
    "scheme_name": "HTTPBearer",
    "description": "An API key of a workspace, or a JWT: `Authorization: Bearer <key or token>`.",
}

Workspace = Annotated[str, Security(_WorkspaceKey(**_SCHEME))]
"""A route's caller's workspace (the caller is also set for what the route runs: ownership holds)."""

Caller = Annotated[Identity, Security(_CallerKey(**_SCHEME))]
"""A route's caller: workspace, user, roles (``orchestra.hosting.identity``)."""


class ErrorDetail(BaseModel):
    code: str = Field(description="A stable, machine-readable code, e.g. `session_conflict`.")
    message: str = Field(description="What was wrong and what to do.")
    retry_after: float | None = None
    request_id: str | None = Field(
        default=None,
        description="The request's id (also its X-Request-Id header), as the server's log names it.",
    )


class ErrorBody(BaseModel):
    """Every error: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The documented error responses of a route (all share ``ErrorBody``)."""
    described = {
        400: "The body is not valid JSON.",
        401: "No valid API key or token (the code names the rule: token_expired, wrong_audience, ...).",
        403: "A valid token that names no workspace or user.",
        404: "No such agent, session, run or interrupt in this workspace.",
        405: "Method not allowed (the Allow header lists the allowed ones).",
        409: "The session is busy or another writer won (`session_busy`, `session_conflict`: retry after "
        "Retry-After seconds), a run was rolled back (`run_rolled_back`), an interrupt was already answered, "
        "or a run has already ended (`run_finished`).",
        413: "The body is over the configured limit.",
        422: "The request is invalid (a field is named).",
        429: "The session's queue is full (`queue_full`): send the message later.",
        500: "The server failed (or its storage is misconfigured); the body carries the request id its "
        "log names.",
        502: "The run failed (the model or a tool); the run is recorded.",
        503: "The storage is unavailable (nothing was stored), or lost an answer (`outcome_unknown`: "
        "repeat with the same Idempotency-Key to learn the outcome); retry after Retry-After.",
        507: "The storage is full: the turn was not stored.",
    }
    return {status: {"model": ErrorBody, "description": described[status]} for status in statuses}


ID_PATH = Path(
    pattern=STORABLE_ID, description="1-128 letters, digits, '.', '_' or '-', not starting with '.'."
)


_ID_FIELDS = {"session_id": "invalid_session_id", "run_id": "invalid_run_id"}


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "invalid_json", "the request body is not valid JSON; send a JSON object"
    if any(e.get("loc") == ("body",) and isinstance(e.get("input"), bytes) for e in errors):
        # A Content-Type other than JSON (or text/plain, a form: those are read as JSON, see app.py).
        return (
            422,
            "not_json",
            "the body is not sent as JSON: send a JSON object with Content-Type: application/json",
        )
    for error in errors:  # a bad id is named as such, with the rule in words rather than its regex
        field = str(error.get("loc", ("",))[-1])
        if field in _ID_FIELDS and error.get("type") in ("string_pattern_mismatch", "string_too_long"):
            value = error.get("input")
            shown = repr(value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "...")
            return (
                422,
                _ID_FIELDS[field],
                f"{field} {shown} is not a valid id: use 1-128 letters, digits, '.', '_' or '-', not "
                "starting with '.'",
            )
    parts = []
    for error in errors:
        loc = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {error.get('msg', 'invalid')}")
    return 422, "invalid_request", "; ".join(parts)


async def _run_or_404(runtime: RunService, ws: str, run_id: str) -> RunRecord:
    checked_id(run_id, "run_id")
    try:
        record = await runtime.run_record(ws, run_id)
    except ValueError:  # a record that is not one (RunRecord's validation)
        record = None
    if record is None:
        raise ApiError(404, "unknown_run", f"no run {run_id!r} in this workspace")
    return record


def _failure_response(
    failure: Failure,
    what: RunRecord | BaseException,
    *,
    background: BackgroundTask | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A failure's JSON answer; a storage failure's details go to the log, not the body."""
    if failure.internal:
        log.error(
            "run_storage_failed" if isinstance(what, RunRecord) else "storage_failed",
            request_id=_REQUEST_ID.get(),
            error=what.error if isinstance(what, RunRecord) else f"{type(what).__name__}: {what}",
        )
    headers = dict(headers or {})
    if failure.retry_after is not None:
        headers["Retry-After"] = str(int(failure.retry_after))
    return _error(failure.status, failure.code, failure.message, headers, background=background)


def _plain(value: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready (binary content as base64)."""
    plain: dict[str, Any] = json.loads(dumps(value, lenient=True))
    return plain


class RunAccepted(RunSummary):
    """A background run was accepted (202): follow it with GET /api/v1/runs/{run_id} or its stream."""
