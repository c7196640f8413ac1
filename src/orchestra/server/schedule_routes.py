"""The routes of scheduled runs (``orchestra.hosting.scheduler``; docs/schedules.md).

| route | what |
| --- | --- |
| ``POST /api/v1/schedules`` | create a schedule (201); its ticks count from now |
| ``GET /api/v1/schedules`` | the workspace's schedules the caller sees (its own; all, for an admin or a key) |
| ``GET /api/v1/schedules/{id}`` | one schedule, with its latest tick records |
| ``DELETE /api/v1/schedules/{id}`` | delete one (204); one the server config names: 409 (remove it there) |
| ``POST /api/v1/schedules/{id}/pause``, ``/resume`` | stop and restart its ticks |
| ``POST /api/v1/schedules/{id}/run`` | start its run now, outside its ticks (202) |

A schedule records its maker as ``owner``; another user's schedule answers 404 (``scheduler.py``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from orchestra.hosting import RunService
from orchestra.hosting.schedules import Schedule, TickRecord
from orchestra.server._api import (
    ID_PATH,
    STORABLE_ID,
    ApiError,
    Metadata,
    RunAccepted,
    Workspace,
    _errors,
    _plain,
)

__all__ = ["mount_schedules"]


class ScheduleRequest(BaseModel):
    """A new schedule: what runs, when (cron in a time zone), on which session, and what missed ticks do."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=STORABLE_ID, description="The schedule's id.")
    agent: str = Field(pattern=STORABLE_ID, description="The hosted agent or pipeline each tick runs.")
    cron: str = Field(
        min_length=1,
        max_length=200,
        description="Five fields (minute first), or six with seconds last, e.g. '0 7 * * *'.",
    )
    timezone: str = Field(default="UTC", max_length=100, description="An IANA time zone, e.g. Europe/Paris.")
    input: Any = Field(default="", description="Each run's input; {tick} and {date} are the tick's time/day.")
    session: Literal["new", "continue", "none"] = Field(
        default="new", description="new: a session per run; continue: every run on session_id; none."
    )
    session_id: str | None = Field(default=None, pattern=STORABLE_ID, description="With continue.")
    missed: Literal["skip", "run_once"] = Field(
        default="skip", description="Ticks missed while every server was down: skip, or run once for all."
    )
    missed_after_s: float = Field(default=60.0, gt=0, le=366 * 86400, description="When a tick is missed.")
    metadata: Metadata = Field(default_factory=dict, description="Given to each run's metadata.")
    paused: bool = False


class ScheduleList(BaseModel):
    schedules: list[Schedule]


class ScheduleDetail(Schedule):
    ticks: list[TickRecord] = Field(description="Its latest tick records, oldest first.")


def mount_schedules(app: FastAPI, runtime: RunService) -> None:
    """Add the routes of the module docstring to ``app``."""
    schedules = runtime.schedules

    @app.post(
        "/api/v1/schedules",
        status_code=201,
        response_model=Schedule,
        responses=_errors(400, 401, 404, 409, 422, 500),
    )
    async def create_schedule(body: ScheduleRequest, ws: Workspace) -> dict[str, Any]:
        """Create a schedule of this workspace: each tick of its cron expression starts one background
        run of its agent, on whichever server of the storage claims the tick first."""
        schedules.hosted(ws, body.agent)  # 404 before what the schedule says is checked
        try:
            schedule = Schedule.model_validate(body.model_dump())
        except ValueError as exc:
            raise ApiError(422, "invalid_schedule", str(exc).split("\n", 1)[-1].strip()) from None
        return (await runtime.create_schedule(ws, schedule)).model_dump(mode="json")

    @app.get("/api/v1/schedules", response_model=ScheduleList, responses=_errors(401, 500))
    async def list_schedules(ws: Workspace) -> dict[str, Any]:
        """The workspace's schedules the caller sees (its own, or all for an admin or a key), by id."""
        return {"schedules": [s.model_dump(mode="json") for s in await schedules.listed(ws)]}

    @app.get(
        "/api/v1/schedules/{schedule_id}",
        response_model=ScheduleDetail,
        responses=_errors(401, 404, 422, 500),
    )
    async def get_schedule(
        schedule_id: Annotated[str, ID_PATH],
        ws: Workspace,
        ticks: Annotated[int, Query(ge=0, le=1000, description="How many tick records.")] = 20,
    ) -> dict[str, Any]:
        """A schedule and its latest tick records (what each tick did: its run, or that it was missed)."""
        schedule = await schedules.get(ws, schedule_id)
        records = await schedules.store(ws).ticks(schedule_id, ticks) if ticks else []
        return {**schedule.model_dump(mode="json"), "ticks": [r.model_dump(mode="json") for r in records]}

    @app.delete(
        "/api/v1/schedules/{schedule_id}", status_code=204, responses=_errors(401, 404, 409, 422, 500)
    )
    async def delete_schedule(schedule_id: Annotated[str, ID_PATH], ws: Workspace) -> Response:
        """Delete a schedule made over the API, and its tick records (runs it started stay)."""
        await runtime.delete_schedule(ws, schedule_id)
        return Response(status_code=204)

    @app.post(
        "/api/v1/schedules/{schedule_id}/pause",
        response_model=Schedule,
        responses=_errors(401, 404, 422, 500),
    )
    async def pause_schedule(schedule_id: Annotated[str, ID_PATH], ws: Workspace) -> dict[str, Any]:
        """Pause a schedule: no tick runs until it is resumed (those in between are not missed ticks)."""
        return (await runtime.pause_schedule(ws, schedule_id, True)).model_dump(mode="json")

    @app.post(
        "/api/v1/schedules/{schedule_id}/resume",
        response_model=Schedule,
        responses=_errors(401, 404, 422, 500),
    )
    async def resume_schedule(schedule_id: Annotated[str, ID_PATH], ws: Workspace) -> dict[str, Any]:
        """Resume a paused schedule: its ticks run again from now."""
        return (await runtime.pause_schedule(ws, schedule_id, False)).model_dump(mode="json")

    @app.post(
        "/api/v1/schedules/{schedule_id}/run",
        status_code=202,
        response_model=RunAccepted,
        responses=_errors(401, 404, 409, 422, 429, 500, 503),
    )
    async def run_schedule(schedule_id: Annotated[str, ID_PATH], ws: Workspace) -> JSONResponse:
        """Start the schedule's run now, outside its ticks (paused or not): 202 with the run."""
        record = await runtime.run_schedule(ws, schedule_id)
        return JSONResponse(_plain(record.summary()), status_code=202)
