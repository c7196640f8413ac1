"""Searching runs and sessions over HTTP (``orchestra.hosting.search``): the query parameters both
``GET /api/v1/runs`` and ``GET /api/v1/sessions`` take, and the sessions route.

| parameter | what |
| --- | --- |
| ``status`` | repeatable: runs with one of these statuses (a session: its latest run's) |
| ``since``, ``until`` | ISO 8601 times: started at or after ``since``, before ``until`` (a session: last saved) |
| ``metadata`` | repeatable ``key:value``: runs started with that metadata (a session: its latest run's) |
| ``order`` | ``newest`` first (the default) or ``oldest`` |
| ``limit``, ``cursor`` | a page's size; the ``next_cursor`` of the page before |
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query
from pydantic import BaseModel, Field

from orchestra.hosting import HostedSpec, RunService
from orchestra.hosting.search import Query as Search
from orchestra.hosting.search import parse_metadata, utc
from orchestra.server._api import Workspace, _errors

__all__ = ["SearchQuery", "mount_search", "search_query"]

Status = Literal["answered", "completed", "executing", "failed", "interrupted", "queued", "rolled_back"]
EARLIEST, LATEST = datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)


def search_query(
    status: Annotated[list[Status] | None, Query(description="Repeatable: runs with one of these.")] = None,
    since: Annotated[datetime | None, Query(description="Started (saved) at or after this time.")] = None,
    until: Annotated[datetime | None, Query(description="Started (saved) before this time.")] = None,
    metadata: Annotated[
        list[str] | None,
        Query(description="Repeatable key:value (or a bare key: that it is there), e.g. customer:acme."),
    ] = None,
    order: Annotated[Literal["newest", "oldest"], Query(description="Time order.")] = "newest",
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many.")] = 100,
    cursor: Annotated[
        str | None, Query(max_length=2000, description="The next_cursor of the page before.")
    ] = None,
) -> Search:
    """The search a request's query parameters ask for."""
    return Search(
        statuses=frozenset(status or []),
        since=utc(since, edge=EARLIEST),
        until=utc(until, edge=LATEST),
        metadata=parse_metadata(metadata or []),
        limit=limit,
        order=order,
        cursor=cursor,
    )


SearchQuery = Annotated[Search, Depends(search_query)]


class SessionHitBody(BaseModel):
    agent_id: str
    session_id: str
    updated_at: str | None = Field(description="When it was last saved (ISO 8601), if known.")
    status: str | None = Field(description="Its latest run's status (none: no run of the server).")
    last_run_id: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict, description="Its latest run's metadata.")


class SessionPage(BaseModel):
    sessions: list[SessionHitBody]
    next_cursor: str | None = None


def mount_search(app: FastAPI, runtime: RunService, hosted: Callable[[str, str], HostedSpec]) -> None:
    """Add ``GET /api/v1/sessions`` to ``app`` (``GET /api/v1/runs`` takes ``SearchQuery`` in app.py)."""
    config = runtime.config

    @app.get("/api/v1/sessions", response_model=SessionPage, responses=_errors(401, 404, 422, 500))
    async def search_sessions(
        ws: Workspace, query: SearchQuery, agent_id: str | None = None
    ) -> dict[str, Any]:
        """Sessions of the workspace's agents (or of one), last saved first, each with its latest run's
        status and metadata; filtered and paged as runs are."""
        if agent_id is not None:
            ids = [hosted(agent_id, ws).id]
        else:
            ids = [h.id for h in config.agents if h.workspace == ws]
        hits, cursor = await runtime.search_sessions(ws, ids, query)
        return {
            "sessions": [
                {
                    "agent_id": h.agent_id,
                    "session_id": h.session_id,
                    "updated_at": h.updated_at.isoformat() if h.updated_at else None,
                    "status": h.last_run.status if h.last_run else None,
                    "last_run_id": h.last_run.run_id if h.last_run else None,
                    "metadata": h.last_run.metadata if h.last_run else {},
                }
                for h in hits
            ],
            "next_cursor": cursor,
        }
