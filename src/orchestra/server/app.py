"""The HTTP API (FastAPI): invoke hosted agents in three memory modes, read sessions and runs.

Every ``/api`` route needs ``Authorization: Bearer <key>``; a key belongs to a workspace and a workspace
never sees another's agents, sessions or runs (their ids answer 404). Errors are always
``{"error": {"code": ..., "message": ...}}`` with a 4xx status for bad input, and the status of a failed
run by the error's type (``orchestra.hosting.outcomes``). No error reaches uvicorn: a connection stays
usable after a 5xx. Each route maps its request to one call of the run service (``orchestra.hosting``) and
what it answers to one HTTP answer; a request hosting refuses (``Refused``) is answered with its status,
code and message.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from typing import Annotated, Any

import structlog
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestra._logging import get_logger
from orchestra.errors import SnapshotError, StorageError
from orchestra.hosting import (
    Busy,
    HostedSpec,
    Invocation,
    Refused,
    RunRecord,
    RunService,
    ServerConfig,
    failure_of,
)
from orchestra.hosting.config import load_config
from orchestra.hosting.identity import may_call
from orchestra.server._api import (
    _REQUEST_ID,
    ID_PATH,
    SSE_EVENTS,
    STORABLE_ID,
    AgentList,
    ApiError,
    InvokeRequest,
    InvokeResponse,
    RunList,
    SessionDetail,
    SessionList,
    Workspace,
    _error,
    _errors,
    _failure_response,
    _plain,
    _run_or_404,
    _validation_message,
    checked_id,
    workspace,
)
from orchestra.server.access_log import ACCESS_LOG_ENV_VAR, AccessLog, configure_access_log, note_run
from orchestra.server.auth import Authenticator
from orchestra.server.routes import invocation_of, mount_runs
from orchestra.server.search_routes import SearchQuery, mount_search
from orchestra.server.streams import sse_stream
from orchestra.server.tenant_routes import mount_tenant_routes

__all__ = [
    "CONFIG_ENV_VAR",
    "TEMPORAL_ENV_VAR",
    "ApiError",
    "InvokeRequest",
    "create_app",
    "create_app_from_env",
    "workspace",
]

CONFIG_ENV_VAR = "ORCHESTRA_SERVER_CONFIG"
TEMPORAL_ENV_VAR = "ORCHESTRA_SERVER_TEMPORAL"  # orchestra serve --temporal, for each worker process


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


class _JsonBody:
    """Read an ``/api`` body as JSON when its ``Content-Type`` says nothing, ``text/plain`` or a form
    (``curl -d`` sends one): every API body is JSON, and the answer to a body that is not is a 400 that
    says so, rather than FastAPI's "Input should be a valid dictionary".

    FastAPI refuses these types as JSON because a page on another site may send them without a CORS
    preflight (CSRF). That cannot reach a turn here: every ``/api`` route needs ``Authorization: Bearer``,
    a header no cross-site request carries without a preflight, and this server grants none (no CORS);
    the dashboard's cookie counts for nothing under ``/api``, and the dashboard's own forms are not under
    ``/api`` (they check their CSRF token and ``Origin``).
    """

    SIMPLE = (b"", b"text/plain", b"application/x-www-form-urlencoded")  # sent without a preflight

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].startswith("/api/"):
            headers = scope.get("headers") or []
            declared = next((value for name, value in headers if name == b"content-type"), b"")
            if declared.split(b";")[0].strip().lower() in self.SIMPLE:
                kept = [(name, value) for name, value in headers if name != b"content-type"]
                # In place: the access log, outside, reads the route the router puts in this scope.
                scope["headers"] = [*kept, (b"content-type", b"application/json")]
        await self.app(scope, receive, send)


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
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large()(scope, receive, send)
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
                await self._too_large()(scope, receive, send)

        await self.app(scope, limited, guarded_send)

    def _too_large(self) -> JSONResponse:
        # Built only when needed: a response made for every request cost every request.
        return _error(
            413, "body_too_large", f"the request body is over the {self.limit}-byte limit; send less"
        )


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI application serving ``config``."""
    runtime = RunService(config)
    authenticator = Authenticator(config)
    keys = authenticator.keys
    hosted_by_id = {h.id: h for h in config.agents}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with runtime.running():  # heartbeat, background runs, stop requests, sweeps
            yield

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
    app.state.auth = authenticator
    app.state.hosted = hosted_by_id
    app.add_middleware(_Guard)
    app.add_middleware(_JsonBody)
    app.add_middleware(_BodyLimit, limit=config.limits.max_body_bytes)
    app.add_middleware(AccessLog)  # inside the request id, outside everything that answers
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

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        if isinstance(exc, Busy) and exc.code == "session_busy":
            log.info("session_busy", active=exc.active, request_id=_REQUEST_ID.get())
        headers = {"Retry-After": str(int(exc.retry_after))} if exc.retry_after else None
        return _error(exc.status, exc.code, exc.message, headers)

    @app.exception_handler(StorageError)
    @app.exception_handler(SnapshotError)
    async def storage_failed(request: Request, exc: Exception) -> JSONResponse:
        # A read route (sessions, runs) on failing storage: answered by the error's type, like a turn.
        return _failure_response(failure_of(exc, "-"), exc)

    def hosted(agent_id: str, ws: str) -> HostedSpec:
        found = hosted_by_id.get(agent_id)
        if found is None or found.workspace != ws or not may_call(found):
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
            **_errors(400, 401, 404, 409, 413, 422, 429, 500, 502, 503, 507),
            200: {"content": SSE_EVENTS},
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
        """Invoke an agent or pipeline, or answer its open interrupts (``responses``); with
        ``?stream=true`` events come as server-sent events, each with its id in the run's log."""
        invocation = invocation_of(body, hosted(agent_id, ws), config, request, idempotency_key)
        if stream:
            await runtime.admit(ws, invocation)  # another user's session: 404 before the stream starts
            return StreamingResponse(
                sse_stream(runtime.events(ws, invocation)), media_type="text/event-stream"
            )
        record, failure = await runtime.invoke(ws, invocation)
        note_run(record.run_id)  # a repeated key's first run
        # The run record is written after the answer is sent (it is readable from memory until then; a
        # server killed in between leaves it "executing", and it is settled from the session when read).
        write_record = BackgroundTask(runtime.flush_records, ws)
        headers = {"Idempotent-Replayed": "true"} if record.run_id != invocation.run_id else None
        if failure is not None:
            return _failure_response(failure, record, background=write_record, headers=headers)
        answer = record.answer()
        if not isinstance(answer["output"], str | None) or "interrupts" in answer:  # made JSON-ready
            answer = _plain(answer)
        return JSONResponse(answer, background=write_record, headers=headers)

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
            if item.workspace == ws and may_call(item):
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
        listed = await runtime.list_sessions(ws, hosted(agent_id, ws).id)
        return {
            "sessions": [
                {"session_id": i.session_id, "updated_at": i.updated_at.isoformat() if i.updated_at else None}
                for i in listed
            ]
        }

    @app.get(
        "/api/v1/agents/{agent_id}/sessions/{session_id}",
        response_model=SessionDetail,
        response_model_exclude_none=True,
        responses=_errors(401, 404, 422, 500),
    )
    async def session(agent_id: str, session_id: Annotated[str, ID_PATH], ws: Workspace) -> dict[str, Any]:
        """A session's whole conversation, every turn kept (``context_start``: where what the model is
        given starts); a pipeline's: its run status and every agent node's messages."""
        target = hosted(agent_id, ws)
        checked_id(session_id, "session_id")
        # A damaged session is 500 session_damaged (the SnapshotError handler below), not 404.
        out: dict[str, Any] = {"session_id": session_id, "agent_id": agent_id}
        for scope in await runtime.describe_session(ws, target.id, session_id):
            if scope.kind == "agent":
                out["messages"], out["context_start"], out["state"] = (
                    scope.messages,
                    scope.context_start,
                    scope.state,
                )
            else:
                out["run"], out["nodes"] = scope.summary, scope.nodes
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
        invocation = Invocation(target, "", session_id, None, on_busy=config.on_busy(target))
        invocation.resume = True
        record, failure = await runtime.invoke(ws, invocation)
        write_record = BackgroundTask(runtime.flush_records, ws)
        if failure is not None:
            return _failure_response(failure, record, background=write_record)
        return JSONResponse(_plain(record.answer()), background=write_record)

    @app.delete(
        "/api/v1/agents/{agent_id}/sessions/{session_id}",
        status_code=204,
        responses=_errors(401, 404, 422, 500),
    )
    async def delete_session(agent_id: str, session_id: Annotated[str, ID_PATH], ws: Workspace) -> Response:
        """Forget a session."""
        target = hosted(agent_id, ws)
        checked_id(session_id, "session_id")
        await runtime.delete_session(ws, target.id, session_id)
        return Response(status_code=204)

    @app.get("/api/v1/runs", response_model=RunList, responses=_errors(401, 404, 422, 500))
    async def runs(
        ws: Workspace,
        query: SearchQuery,
        agent_id: str | None = None,
        session_id: Annotated[str | None, Query(pattern=STORABLE_ID)] = None,
    ) -> dict[str, Any]:
        """Runs, newest first, optionally of one agent and one session, filtered by status, time and
        metadata, a page at a time (``next_cursor``; docs/server.md, "Searching runs and sessions")."""
        checked_id(session_id, "session_id")
        if agent_id is not None:
            ids = [hosted(agent_id, ws).id]
        else:
            ids = [h.id for h in config.agents if h.workspace == ws]
        records, cursor = await runtime.search_runs(ws, ids, session_id, query)
        return {"runs": [r.summary() for r in records], "next_cursor": cursor}

    @app.get("/api/v1/runs/{run_id}", response_model=RunRecord, responses=_errors(401, 404, 422, 500))
    async def run(run_id: Annotated[str, ID_PATH], ws: Workspace) -> dict[str, Any]:
        """A run: its conversation (tool calls included), per-node status for pipelines, timings, usage."""
        record = await _run_or_404(runtime, ws, run_id)
        return _plain(record.model_dump(mode="python"))

    mount_runs(app, runtime, hosted)
    from orchestra.server.schedule_routes import mount_schedules

    mount_schedules(app, runtime)
    mount_search(app, runtime, hosted)
    from orchestra.server.memory_routes import mount_memory

    mount_memory(app, runtime)
    mount_tenant_routes(app, runtime)  # usage, audit
    from orchestra.server.wait_routes import mount_wait_routes

    mount_wait_routes(app, runtime)
    from orchestra.server.dashboard import mount_dashboard
    from orchestra.server.protocols import mount_protocols

    mount_dashboard(app, runtime, keys, config)
    mount_protocols(
        app, runtime, authenticator, config
    )  # MCP, A2A, AG-UI: those whose packages are installed
    return app


def create_app_from_env() -> FastAPI:
    """For ``uvicorn --factory``: the app for the config named by ``ORCHESTRA_SERVER_CONFIG``, its access
    log as ``ORCHESTRA_ACCESS_LOG`` says (console, json or off; console when unset), and traces to
    ``ORCHESTRA_OTLP_ENDPOINT`` when set: each worker process has its own exporter and log handler;
    ``ORCHESTRA_SERVER_TEMPORAL`` (``--temporal``) replaces the config's ``temporal:``."""
    configure_access_log(os.environ.get(ACCESS_LOG_ENV_VAR, "console"))
    endpoint = os.environ.get("ORCHESTRA_OTLP_ENDPOINT")
    if endpoint:
        from orchestra.tracing import configure_otlp

        configure_otlp(endpoint, "orchestra-serve")
    return create_app(
        load_config(os.environ[CONFIG_ENV_VAR], temporal=os.environ.get(TEMPORAL_ENV_VAR) or None)
    )
