"""The route that sends an event to a waiting run (docs/waiting.md).

| route | what |
| --- | --- |
| ``POST /api/v1/runs/{id}/events`` | send ``{"name", "payload"}`` to the run's session, once per Idempotency-Key |

The event is kept in the session's inbox until a wait for its name takes it (at once if one waits now, on
this server or any other): a wait takes each event once, and a repeat with the same key is answered as
the first post was, with ``Idempotent-Replayed: true``, and keeps nothing new.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

from fastapi import FastAPI, Header
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from orchestra.hosting import RunService, validate_idempotency_key
from orchestra.server._api import ID_PATH, ApiError, Workspace, _check_storable, _errors, _run_or_404

__all__ = ["EventAccepted", "EventRequest", "mount_wait_routes"]


class EventRequest(BaseModel):
    """An event for a run that waits (or will wait) for it by name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$", description="The event's name."
    )
    payload: Any = Field(default=None, description="Any JSON: what wait_for_event returns.")


class EventAccepted(BaseModel):
    """An event kept for the run's session."""

    run_id: str
    session_id: str
    name: str
    key: str = Field(description="The Idempotency-Key it is kept under.")
    duplicate: bool = Field(description="True when the key was sent before: nothing new was kept.")


def mount_wait_routes(app: FastAPI, runtime: RunService) -> None:
    """Add the route of the module docstring to ``app``."""

    @app.post(
        "/api/v1/runs/{run_id}/events",
        status_code=202,
        response_model=EventAccepted,
        responses=_errors(401, 404, 409, 413, 422, 500, 503),
    )
    async def send_event(
        run_id: Annotated[str, ID_PATH],
        body: EventRequest,
        ws: Workspace,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias="Idempotency-Key",
                description="The event's identity: a repeat with this key is not delivered again.",
            ),
        ] = None,
    ) -> JSONResponse:
        """Send an event to the run's session: a wait for ``name`` takes it (now, or when one begins),
        exactly once; on any server of the storage."""
        record = await _run_or_404(runtime, ws, run_id)
        if record.session_id is None:
            raise ApiError(
                409, "no_session", f"run {run_id} has no session: only a session's runs can wait for events"
            )
        key = validate_idempotency_key(idempotency_key) if idempotency_key is not None else str(uuid.uuid4())
        _check_storable(json.dumps(body.payload, ensure_ascii=False), "payload")
        kept = await runtime.send_event(ws, record, body.name, body.payload, key)  # Refused: 422 reused
        accepted = EventAccepted(
            run_id=run_id, session_id=record.session_id, name=body.name, key=key, duplicate=not kept
        )
        headers = {"Idempotent-Replayed": "true"} if not kept else None
        return JSONResponse(accepted.model_dump(), status_code=202, headers=headers)
