"""The HTTP API (FastAPI): invoke hosted agents in three memory modes, read sessions and runs.

Every ``/api`` route needs ``Authorization: Bearer <key>``; a key belongs to a workspace and a workspace
never sees another's agents, sessions or runs (their ids answer 404). Errors are always
``{"error": {"code": ..., "message": ...}}`` with a 4xx status for bad input, and the status of a failed
run by the error's type (``outcomes.py``). No error reaches uvicorn: a connection stays usable after a
5xx.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import secrets
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import structlog
from fastapi import Depends, FastAPI, Header, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestra._ids import validate_id
from orchestra._json import dumps
from orchestra._logging import get_logger
from orchestra.errors import OrchestraError, SnapshotError, StorageError
from orchestra.server.auth import KeyRing
from orchestra.server.config import HostedSpec, ServerConfig, load_config
from orchestra.server.idempotency import KeyRefused, fingerprint, validate_idempotency_key
from orchestra.server.outcomes import Failure, failure_of
from orchestra.server.runs import RunRecord, RunSummary
from orchestra.server.runtime import Invocation, Runtime, input_text
from orchestra.session import admin
from orchestra.session._layout import session_prefix

__all__ = ["CONFIG_ENV_VAR", "ApiError", "InvokeRequest", "create_app", "create_app_from_env"]

CONFIG_ENV_VAR = "ORCHESTRA_SERVER_CONFIG"


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
"""The storage's id rule as a JSON Schema pattern (the same as ``validate_id``), so the API document
and the server agree on which ids are valid."""


_REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("orchestra_request_id", default="-")
_LOGGED = {401: "auth_refused", 409: "session_conflict"}  # plus every 5xx


def _error(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    background: BackgroundTask | None = None,
) -> JSONResponse:
    """An error answer; it carries the request id, and refusals worth an operator's eye are logged with it."""
    request_id = _REQUEST_ID.get()
    if status in _LOGGED or status >= 500:
        event = _LOGGED.get(status, "request_failed")
        (log.error if status == 500 else log.warning)(event, status=status, code=code, request_id=request_id)
    body = {"error": {"code": code, "message": message, "request_id": request_id}}
    return JSONResponse(body, status_code=status, headers=headers, background=background)


class HistoryTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str


class InvokeRequest(BaseModel):
    """Invoke a hosted agent. Give ``session_id`` (session mode), ``history`` (stateless), or neither."""

    model_config = ConfigDict(extra="forbid")

    input: Any = Field(description='What to do: a string, or an object such as {"message": "..."}.')
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
    messages: list[dict[str, Any]] | None = Field(default=None, description="An agent's conversation.")
    state: dict[str, Any] | None = Field(default=None, description="An agent's state.")
    run: dict[str, Any] | None = Field(default=None, description="A pipeline's run: status, task, nodes.")
    nodes: dict[str, list[dict[str, Any]]] | None = Field(
        default=None, description="A pipeline's agent nodes' conversations."
    )


class RunList(BaseModel):
    runs: list[RunSummary]


class InvokeResponse(BaseModel):
    output: Any
    session_id: str | None
    run_id: str
    usage: dict[str, int]
    status: str
    resumed: bool = False


log = get_logger("orchestra.server")

SECURITY_HEADERS = [
    # No script anywhere; the pages' only inline part is their <style>.
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
        b"frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class _SecurityHeaders:
    """Add ``SECURITY_HEADERS`` and an ``X-Request-Id`` to every response (pages, API, errors, streams).

    The request id is also bound to the request's log lines and carried by every error body.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = secrets.token_hex(8)
        headers = [*SECURITY_HEADERS, (b"x-request-id", request_id.encode())]

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        # Not reset afterwards: a request runs in a task of its own, and the 500 handler, which runs outside
        # this middleware (in Starlette's outermost one), still needs the id.
        _REQUEST_ID.set(request_id)
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            await self.app(scope, receive, with_headers)


class _Guard:
    """Answer any exception that escaped the app with a JSON 500, and never re-raise it: an exception that
    reaches uvicorn is logged as a traceback and resets a kept-alive connection. After the answer has
    started (a stream), it is logged and the answer ends where it stopped."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            request_id = _REQUEST_ID.get()
            log.error("internal_error", request_id=request_id, path=scope.get("path"), exc_info=exc)
            if not started:
                message = f"the server failed (request {request_id}); its log has the details"
                await _error(500, "internal", message)(scope, receive, send)


class _BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, whether or not they announce their length."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        too_large = _error(
            413, "body_too_large", f"the request body is over the {self.limit}-byte limit; send less"
        )
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await too_large(scope, receive, send)
            return
        seen = 0
        exceeded = False

        async def limited() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # Stop reading: the app sees the body end here, and its answer is replaced by a 413.
                    exceeded = True
                    return {"type": "http.request", "body": b"", "more_body": False}
            return message

        replaced = False

        async def guarded_send(message: Message) -> None:
            nonlocal replaced
            if not exceeded:
                await send(message)
            elif not replaced:
                replaced = True
                await too_large(scope, receive, send)

        await self.app(scope, limited, guarded_send)


_BEARER = HTTPBearer(
    auto_error=False, description="An API key of a workspace: `Authorization: Bearer <key>`."
)


async def workspace(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)] = None
) -> str:
    """The caller's workspace, from ``Authorization: Bearer <key>`` (401 without a valid key)."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    keys: KeyRing = request.app.state.keys
    found = keys.workspace_of(key.strip()) if scheme.lower() == "bearer" else None
    if found is None:
        message = (
            "a valid API key is required: Authorization: Bearer <key>"
            if header
            else "missing Authorization: Bearer <key>"
        )
        raise ApiError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})
    return found


Workspace = Annotated[str, Depends(workspace)]


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
        401: "No valid API key.",
        404: "No such agent, session or run in this workspace.",
        405: "Method not allowed (the Allow header lists the allowed ones).",
        409: "Another invocation of this session won: retry after Retry-After seconds.",
        413: "The body is over the configured limit.",
        422: "The request is invalid (a field is named).",
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


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI application serving ``config``."""
    runtime = Runtime(config)
    keys = KeyRing(config.api_keys)
    hosted_by_id = {h.id: h for h in config.agents}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        runtime.liveness.start()  # other servers on the storage learn that this one runs its runs
        try:
            yield
        finally:
            # Records of streams whose client went away before the end are still queued: write them.
            for ws in {h.workspace for h in config.agents}:
                await runtime.flush_records(ws)
            await runtime.liveness.stop()

    app = FastAPI(
        lifespan=lifespan,
        title="orchestra",
        version="1",
        description="Hosted agents and pipelines. Authenticate with `Authorization: Bearer <key>`.",
        # Swagger UI and ReDoc load their script and CSS from a CDN, which the security headers (and a
        # server without internet) refuse: /docs is a page that points at /openapi.json instead.
        docs_url=None,
        redoc_url=None,
    )
    app.state.runtime = runtime
    app.state.keys = keys
    app.state.hosted = hosted_by_id
    app.add_middleware(_Guard)
    app.add_middleware(_BodyLimit, limit=config.limits.max_body_bytes)
    app.add_middleware(_SecurityHeaders)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(*_validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            # FastAPI's answer to a body it cannot decode (not UTF-8): the same code as a body not JSON.
            return _error(400, "invalid_json", "the request body is not UTF-8 JSON; send a JSON object")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of the first route on the path only; list every route's.
            methods = {
                method
                for route in app.routes
                if isinstance(route, APIRoute) and route.path_regex.match(request.url.path)
                for method in route.methods or ()
            }
            headers["Allow"] = ", ".join(sorted(methods))
        return _error(exc.status_code, code, str(exc.detail), headers)

    @app.exception_handler(KeyRefused)
    async def key_refused(request: Request, exc: KeyRefused) -> JSONResponse:
        headers = {"Retry-After": str(int(exc.retry_after))} if exc.retry_after else None
        return _error(exc.status, exc.code, exc.message, headers)

    @app.exception_handler(StorageError)
    @app.exception_handler(SnapshotError)
    async def storage_failed(request: Request, exc: Exception) -> JSONResponse:
        # A read route (sessions, runs) on failing storage: answered by the error's type, like a turn.
        return _failure_response(failure_of(exc, "-"), exc)

    def hosted(agent_id: str, ws: str) -> HostedSpec:
        found = hosted_by_id.get(agent_id)
        if found is None or found.workspace != ws:
            raise ApiError(
                404,
                "unknown_agent",
                f"no agent {agent_id!r} in this workspace; GET /api/v1/agents lists them",
            )
        return found

    @app.post(
        "/api/v1/agents/{agent_id}/invoke",
        response_model=InvokeResponse,
        responses={
            **_errors(400, 401, 404, 409, 413, 422, 500, 502, 503, 507),
            200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}},
        },
    )
    async def invoke(
        agent_id: str,
        body: InvokeRequest,
        ws: Workspace,
        request: Request,
        stream: Annotated[bool, Query()] = False,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias="Idempotency-Key",
                description="Run the request once: a repeat with the same key (and body) gets the first "
                "answer, within 24 hours by default.",
            ),
        ] = None,
    ) -> Any:
        """Invoke an agent or pipeline; with ``?stream=true`` events come as server-sent events."""
        target = hosted(agent_id, ws)
        if body.session_id is not None and body.history is not None:
            raise ApiError(
                422,
                "choose_one_mode",
                "give session_id (the server keeps the history) or history (you keep it), not both",
            )
        if body.history is not None and len(body.history) > config.limits.max_history_messages:
            raise ApiError(
                422,
                "history_too_long",
                f"history has {len(body.history)} turns; the limit is {config.limits.max_history_messages} "
                "(send fewer, or use session mode)",
            )
        task = input_text(body.input)
        _check_storable(task, "input")
        for index, turn in enumerate(body.history or []):
            _check_storable(turn.content, f"history[{index}].content")
        if len(task) > config.limits.max_input_chars:
            raise ApiError(422, "input_too_long", f"input is over {config.limits.max_input_chars} characters")
        history = [t.model_dump() for t in body.history] if body.history is not None else None
        invocation = Invocation(target, task, body.session_id, history)
        if idempotency_key is not None:
            invocation.idempotency_key = validate_idempotency_key(idempotency_key)
            invocation.fingerprint = fingerprint(body.model_dump(mode="json"))
        # W3C trace context: the run's spans continue the caller's trace.
        invocation.trace_headers = {
            k: v for k in ("traceparent", "tracestate") if (v := request.headers.get(k))
        }
        if stream:
            return StreamingResponse(_sse(runtime, ws, invocation), media_type="text/event-stream")
        record, failure = await runtime.invoke(ws, invocation)
        # The run record is written after the answer is sent (it is readable from memory until then; a
        # server killed in between leaves it "executing", and it is settled from the session when read).
        write_record = BackgroundTask(runtime.flush_records, ws)
        headers = {"Idempotent-Replayed": "true"} if record.run_id != invocation.run_id else None
        if failure is not None:
            return _failure_response(failure, record, background=write_record, headers=headers)
        return JSONResponse(_answer(record), background=write_record, headers=headers)

    @app.get("/docs", include_in_schema=False)
    async def api_docs() -> Response:
        """Where the API is described: the OpenAPI document, for any viewer (no CDN script here)."""
        return Response(
            "<!doctype html><title>orchestra API</title><h1>orchestra API</h1><p>The OpenAPI document is "
            "<a href='/openapi.json'>/openapi.json</a>: open it in any OpenAPI viewer, or generate a client "
            "from it. The guide is docs/server.md.</p>",
            media_type="text/html",
        )

    @app.get("/api/v1/agents", response_model=AgentList, responses=_errors(401, 500))
    async def agents(ws: Workspace) -> dict[str, Any]:
        """The agents and pipelines this workspace may invoke."""
        listed = []
        for item in config.agents:
            if item.workspace == ws:
                spec = config.spec_of(item.id).spec
                listed.append(
                    {"id": item.id, "kind": spec.kind, "description": item.description or spec.description}
                )
        return {"agents": listed}

    @app.get(
        "/api/v1/agents/{agent_id}/sessions",
        response_model=SessionList,
        responses=_errors(401, 404, 422, 500),
    )
    async def sessions(agent_id: str, ws: Workspace) -> dict[str, Any]:
        """The sessions of an agent, most recently saved first."""
        target = hosted(agent_id, ws)
        infos = await admin.list_sessions(runtime.agent_storage(ws, target.id))
        infos.sort(key=lambda i: i.updated_at.isoformat() if i.updated_at else "", reverse=True)
        return {
            "sessions": [
                {"session_id": i.session_id, "updated_at": i.updated_at.isoformat() if i.updated_at else None}
                for i in infos
            ]
        }

    @app.get(
        "/api/v1/agents/{agent_id}/sessions/{session_id}",
        response_model=SessionDetail,
        response_model_exclude_none=True,
        responses=_errors(401, 404, 422, 500),
    )
    async def session(agent_id: str, session_id: Annotated[str, ID_PATH], ws: Workspace) -> dict[str, Any]:
        """A session's messages (a pipeline's: its run status and every agent node's messages)."""
        target = hosted(agent_id, ws)
        checked_id(session_id, "session_id")
        storage = runtime.agent_storage(ws, target.id)
        try:
            info = await admin.describe_session(storage, session_id)
        except (OrchestraError, ValueError):
            raise ApiError(
                404, "unknown_session", f"agent {agent_id!r} has no session {session_id!r}"
            ) from None
        out: dict[str, Any] = {"session_id": session_id, "agent_id": agent_id}
        for scope in info.scopes:
            doc = await admin.load_scope(storage, session_id, scope.kind, scope.scope_id)
            if scope.kind == "agent":
                out["messages"] = doc.logs.get("messages", [])
                out["state"] = doc.fields.get("state") or {}
            else:
                out["run"] = scope.summary
                out["nodes"] = {
                    name[len("agent/") : -len("/messages")]: items
                    for name, items in doc.logs.items()
                    if name.startswith("agent/") and name.endswith("/messages")
                }
        return _plain(out)

    @app.post(
        "/api/v1/agents/{agent_id}/sessions/{session_id}/resume",
        response_model=InvokeResponse,
        responses=_errors(401, 404, 409, 422, 500, 502, 503, 507),
    )
    async def resume(agent_id: str, session_id: Annotated[str, ID_PATH], ws: Workspace) -> Any:
        """Finish what the session left open (an agent's turn cut by a crash, a pipeline's unfinished run)
        without sending anything new; 409 ``nothing_to_resume`` if there is nothing."""
        target = hosted(agent_id, ws)
        checked_id(session_id, "session_id")
        invocation = Invocation(target, "", session_id, None)
        invocation.resume = True
        record, failure = await runtime.invoke(ws, invocation)
        write_record = BackgroundTask(runtime.flush_records, ws)
        if failure is not None:
            return _failure_response(failure, record, background=write_record)
        return JSONResponse(_answer(record), background=write_record)

    @app.delete(
        "/api/v1/agents/{agent_id}/sessions/{session_id}",
        status_code=204,
        responses=_errors(401, 404, 422, 500),
    )
    async def delete_session(agent_id: str, session_id: Annotated[str, ID_PATH], ws: Workspace) -> Response:
        """Forget a session."""
        target = hosted(agent_id, ws)
        try:
            prefix = session_prefix(session_id)
        except ValueError as exc:
            raise ApiError(422, "invalid_session_id", str(exc)) from None
        runtime.sessions.forget(ws, target.id, session_id)
        removed = await runtime.agent_storage(ws, target.id).delete_prefix(prefix)
        if not removed:
            raise ApiError(404, "unknown_session", f"agent {agent_id!r} has no session {session_id!r}")
        return Response(status_code=204)

    @app.get("/api/v1/runs", response_model=RunList, responses=_errors(401, 404, 422, 500))
    async def runs(
        ws: Workspace,
        agent_id: str | None = None,
        session_id: Annotated[str | None, Query(pattern=STORABLE_ID)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """Runs, newest first, optionally of one agent and one session."""
        checked_id(session_id, "session_id")
        if agent_id is not None:
            ids = [hosted(agent_id, ws).id]
        else:
            ids = [h.id for h in config.agents if h.workspace == ws]
        records = await runtime.list_runs(ws, ids, session_id, limit)
        return {"runs": [r.summary() for r in records]}

    @app.get("/api/v1/runs/{run_id}", response_model=RunRecord, responses=_errors(401, 404, 422, 500))
    async def run(run_id: Annotated[str, ID_PATH], ws: Workspace) -> dict[str, Any]:
        """A run: its conversation (tool calls included), per-node status for pipelines, timings, usage."""
        record = await _run_or_404(runtime, ws, run_id)
        return _plain(record.model_dump(mode="python"))

    from orchestra.server.dashboard import mount_dashboard
    from orchestra.server.protocols import mount_protocols

    mount_dashboard(app, runtime, keys, config)
    mount_protocols(app, runtime, keys, config)  # MCP, A2A, AG-UI: those whose packages are installed
    return app


async def _run_or_404(runtime: Runtime, ws: str, run_id: str) -> RunRecord:
    checked_id(run_id, "run_id")
    try:
        record = await runtime.run_record(ws, run_id)
    except ValueError:  # a record that is not one (RunRecord's validation)
        record = None
    if record is None:
        raise ApiError(404, "unknown_run", f"no run {run_id!r} in this workspace")
    return record


def _answer(record: RunRecord) -> dict[str, Any]:
    """The 200 answer of a run, from its record (a repeated request gets the same)."""
    answer = InvokeResponse(
        output=record.output,
        session_id=record.session_id,
        run_id=record.run_id,
        usage=record.usage,
        status=record.status,
        resumed=record.resumed,
    )
    return answer.model_dump(mode="json")


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


async def _sse(runtime: Runtime, ws: str, invocation: Invocation) -> AsyncIterator[bytes]:
    """The events of a streamed run; the last is ``result`` or ``error`` (with the code a non-streamed
    request would get as its status)."""

    def event(name: str, payload: Any) -> bytes:
        return f"event: {name}\ndata: {dumps(payload, lenient=True)}\n\n".encode()

    def error(code: str, message: str, retry_after: float | None, run_id: str | None) -> bytes:
        detail: dict[str, Any] = {"code": code, "message": message}
        if retry_after is not None:
            detail["retry_after"] = retry_after
        return event("error", {"error": detail, "run_id": run_id})

    try:
        async for name, data in runtime.stream(ws, invocation):
            if name == "result":
                yield event("result", _answer(data))
            elif name == "error":
                record, failure = data
                if failure.code == "session_conflict":
                    log.warning(
                        "session_conflict",
                        session_id=record.session_id,
                        agent_id=record.agent_id,
                        stream=True,
                        request_id=_REQUEST_ID.get(),
                    )
                message = record.error if failure.code == "run_failed" and record.error else failure.message
                yield error(failure.code, message, failure.retry_after, record.run_id)
            else:
                yield event(name, data)
    except KeyRefused as exc:  # the stream had started: the refusal is its last event
        yield error(exc.code, exc.message, exc.retry_after, None)
    except (StorageError, SnapshotError) as exc:
        failure = failure_of(exc, invocation.run_id)
        log.error("storage_failed", request_id=_REQUEST_ID.get(), error=f"{type(exc).__name__}: {exc}")
        yield error(failure.code, failure.message, failure.retry_after, invocation.run_id)
    await runtime.flush_records(ws)


def create_app_from_env() -> FastAPI:
    """For ``uvicorn --factory``: the app for the config named by ``ORCHESTRA_SERVER_CONFIG`` (and traces to
    ``ORCHESTRA_OTLP_ENDPOINT`` when set: each worker process has its own exporter)."""
    endpoint = os.environ.get("ORCHESTRA_OTLP_ENDPOINT")
    if endpoint:
        from orchestra.tracing import configure_otlp

        configure_otlp(endpoint, "orchestra-serve")
    return create_app(load_config(os.environ[CONFIG_ENV_VAR]))
