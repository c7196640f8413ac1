"""The routes of runs as a platform: start one in the background, follow its events, cancel, resume.

| route | what |
| --- | --- |
| ``POST /api/v1/agents/{id}/runs`` | start a run in the background: 202 with its id (``queued`` or ``executing``) |
| ``GET /api/v1/runs/{id}/stream`` | its events after ``Last-Event-ID``, then live, then its last event |
| ``POST /api/v1/runs/{id}/cancel`` | stop it (202): saved ``interrupted``, resumable |
| ``POST /api/v1/runs/{id}/resume`` | start a stopped or stranded run again, as a new run (202) |
| ``POST /api/v1/runs/{id}/move`` | continue a stopped or stranded pipeline run on the Temporal workers (202) |

``invocation_of`` turns an invoke or run request into an ``Invocation`` (and refuses what is not valid
before any work), for these routes and ``POST .../invoke`` alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from orchestra.hosting import (
    HostedSpec,
    Invocation,
    RunRecord,
    RunService,
    RunSummary,
    ServerConfig,
    cancellable,
    fingerprint,
    input_text,
    validate_idempotency_key,
)
from orchestra.server._api import (
    ID_PATH,
    SSE_EVENTS,
    ApiError,
    InvokeRequest,
    RunAccepted,
    RunRequest,
    Workspace,
    _check_storable,
    _errors,
    _plain,
    _run_or_404,
)
from orchestra.server.access_log import note_run
from orchestra.server.streams import sse_stream

__all__ = ["invocation_of", "mount_runs"]

IDEMPOTENCY_HEADER = Header(
    alias="Idempotency-Key",
    description="Run the request once: a repeat with the same key (and body) gets the first answer, within "
    "24 hours by default.",
)


def invocation_of(
    body: InvokeRequest,
    hosted: HostedSpec,
    config: ServerConfig,
    request: Request,
    idempotency_key: str | None,
) -> Invocation:
    """The invocation a request asks for; ``ApiError`` (4xx) for what cannot be run, before any work."""
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
    for index, turn in enumerate(body.history or []):
        _check_storable(turn.content, f"history[{index}].content")
    responses: dict[str, Any] | None = None
    task: str | None = None
    if body.responses is not None:
        if body.input is not None:
            raise ApiError(
                422, "choose_input_or_responses", "give input (a new message) or responses, not both"
            )
        if body.session_id is None:
            raise ApiError(
                422,
                "responses_need_session",
                "responses answer a session's open interrupts: give its session_id",
            )
        responses = {}
        for answer in body.responses:
            if answer.interrupt_id in responses:
                raise ApiError(
                    422, "duplicate_response", f"interrupt {answer.interrupt_id!r} is answered twice"
                )
            _check_storable(json.dumps(answer.response, ensure_ascii=False), "responses")
            responses[answer.interrupt_id] = answer.response
    else:
        if body.input is None:
            raise ApiError(
                422, "invalid_request", "input: Field required (what to do; or responses to open interrupts)"
            )
        task = input_text(body.input)
        _check_storable(task, "input")
        if len(task) > config.limits.max_input_chars:
            raise ApiError(422, "input_too_long", f"input is over {config.limits.max_input_chars} characters")
    history = [t.model_dump() for t in body.history] if body.history is not None else None
    invocation = Invocation(
        hosted,
        task,
        body.session_id,
        history,
        responses=responses,
        on_busy=body.on_busy or config.on_busy(hosted),
    )
    invocation.metadata = dict(body.metadata or {})
    if idempotency_key is not None:
        invocation.idempotency_key = validate_idempotency_key(idempotency_key)
        invocation.fingerprint = fingerprint(body.model_dump(mode="json"))
    # W3C trace context: the run's spans continue the caller's trace.
    invocation.trace_headers = {k: v for k in ("traceparent", "tracestate") if (v := request.headers.get(k))}
    note_run(invocation.run_id)
    return invocation


def _accepted(record: RunRecord, replayed: bool = False) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(_plain(record.summary()), status_code=202, headers=headers)


def mount_runs(app: FastAPI, runtime: RunService, hosted: Callable[[str, str], HostedSpec]) -> None:
    """Add the routes of the module docstring to ``app``."""
    config = runtime.config

    @app.post(
        "/api/v1/agents/{agent_id}/runs",
        status_code=202,
        response_model=RunAccepted,
        responses=_errors(400, 401, 404, 409, 413, 422, 429, 500, 503, 507),
    )
    async def start_run(
        agent_id: str,
        body: RunRequest,
        ws: Workspace,
        request: Request,
        idempotency_key: Annotated[str | None, IDEMPOTENCY_HEADER] = None,
    ) -> JSONResponse:
        """Start a run in the background (202 with its id); follow it with ``GET /api/v1/runs/{id}`` or
        its stream. Its webhook, if given, is called once when it ends."""
        invocation = invocation_of(body, hosted(agent_id, ws), config, request, idempotency_key)
        if body.webhook is not None:
            invocation.webhook = runtime.check_webhook(body.webhook)
        record, replayed = await runtime.start(ws, invocation)
        note_run(record.run_id)
        return _accepted(record, replayed)

    @app.get(
        "/api/v1/runs/{run_id}/stream",
        responses={
            **_errors(401, 404, 422, 500),
            200: {
                "content": SSE_EVENTS,
                "description": "The events.",
            },
        },
        response_class=StreamingResponse,
    )
    async def stream(
        run_id: Annotated[str, ID_PATH],
        ws: Workspace,
        last_event_id: Annotated[
            str | None,
            Header(
                alias="Last-Event-ID", description="The id of the last event received: replay from after it."
            ),
        ] = None,
        after: Annotated[
            int | None, Query(ge=0, description="As Last-Event-ID, for clients that cannot send headers.")
        ] = None,
    ) -> StreamingResponse:
        """A run's events: those after ``Last-Event-ID`` (all without it), then each new one as the run
        goes on, on whichever server it runs, then its last event (``result`` or ``error``)."""
        await _run_or_404(runtime, ws, run_id)
        start_after = after or 0
        if last_event_id is not None and last_event_id.strip():
            if not last_event_id.strip().isdigit():
                raise ApiError(
                    422, "invalid_last_event_id", "Last-Event-ID is the id of an event: a whole number"
                )
            start_after = int(last_event_id.strip())
        return StreamingResponse(
            sse_stream(runtime.follow(ws, run_id, start_after)), media_type="text/event-stream"
        )

    @app.post(
        "/api/v1/runs/{run_id}/cancel",
        status_code=202,
        response_model=RunSummary,
        responses=_errors(401, 404, 409, 422, 500, 503),
    )
    async def cancel(run_id: Annotated[str, ID_PATH], ws: Workspace) -> JSONResponse:
        """Stop a run, on whichever server it runs: it is saved ``interrupted`` (an agent's partial turn
        rolled back, a pipeline's completed nodes kept) and can be resumed. A queued run leaves its
        queue. Answers at once (202); the run's record and stream say when it has stopped."""
        record = await _run_or_404(runtime, ws, run_id)
        if record.final:
            raise ApiError(409, "run_finished", f"run {run_id} has already ended ({record.status})")
        if not cancellable(record):
            raise ApiError(
                409,
                "not_cancellable",
                f"run {run_id} is a plain invoke without a session: it stops when its client goes away",
            )
        await runtime.cancel(ws, record)
        return JSONResponse(_plain((await _run_or_404(runtime, ws, run_id)).summary()), status_code=202)

    @app.post(
        "/api/v1/runs/{run_id}/resume",
        status_code=202,
        response_model=RunAccepted,
        responses=_errors(401, 404, 409, 422, 429, 500, 503, 507),
    )
    async def resume(run_id: Annotated[str, ID_PATH], ws: Workspace) -> JSONResponse:
        """Start a run that was cancelled, failed, or left ``needs_resume`` again, as a new background
        run on its session: a pipeline goes on from its saved nodes, an agent's turn runs again."""
        record = await _run_or_404(runtime, ws, run_id)
        return _accepted(await runtime.resume(ws, record, hosted(record.agent_id, ws)))

    @app.post(
        "/api/v1/runs/{run_id}/move",
        status_code=202,
        response_model=RunAccepted,
        responses=_errors(401, 404, 409, 422, 429, 500, 503, 507),
    )
    async def move(run_id: Annotated[str, ID_PATH], ws: Workspace) -> JSONResponse:
        """Continue a pipeline run that was cancelled, failed, or left ``needs_resume`` (its server
        killed) on the server's Temporal workers (``temporal:`` in its config), as a new background run:
        the nodes it completed are not run again."""
        record = await _run_or_404(runtime, ws, run_id)
        return _accepted(await runtime.move(ws, record, hosted(record.agent_id, ws)))
