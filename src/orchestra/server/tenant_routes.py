"""The routes of many tenants: what a caller has spent (``GET /api/v1/usage``) and, for admins, the audit
log (``GET /api/v1/audit``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, Query
from pydantic import BaseModel, ConfigDict, Field

from orchestra.hosting import RunService
from orchestra.server._api import ApiError, Caller, _errors

__all__ = ["mount_tenant_routes"]


class QuotaUsage(BaseModel):
    quota: str = Field(description="The quota's name: workspace, period, user, and its place in the config.")
    per: str = Field(description="workspace or user")
    period: str = Field(description="The UTC day (YYYY-MM-DD) or month (YYYY-MM) counted.")
    resets_at: str = Field(description="When the period ends (ISO 8601).")
    limits: dict[str, float]
    spent: dict[str, float]


class UsageAnswer(BaseModel):
    workspace: str
    user: str
    quotas: list[QuotaUsage]


class AuditEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    at: str = Field(description="When (ISO 8601, UTC).")
    action: str = Field(description="run.create, interrupt.answer, run.cancel, run.resume, session.delete")
    user: str | None = Field(description="Who (the caller's user; null: the server itself).")
    via: str | None = Field(description="api_key, jwt or hook.")
    agent_id: str | None = None
    session_id: str | None = None
    run_id: str | None = None


class AuditAnswer(BaseModel):
    entries: list[AuditEntry]


def mount_tenant_routes(app: FastAPI, runtime: RunService) -> None:
    """Add the routes of the module docstring to ``app``."""

    @app.get("/api/v1/usage", response_model=UsageAnswer, responses=_errors(401, 500))
    async def usage(caller: Caller) -> dict[str, Any]:
        """What the caller's quotas have spent this period (its workspace's, and its own as a user)."""
        quotas = await runtime.usage(caller.workspace)
        return {"workspace": caller.workspace, "user": caller.user, "quotas": quotas}

    @app.get("/api/v1/audit", response_model=AuditAnswer, responses=_errors(401, 403, 422, 500))
    async def audit(
        caller: Caller,
        user: Annotated[str | None, Query(max_length=300, description="Only this user's entries.")] = None,
        action: Annotated[str | None, Query(max_length=100, description="Only this action.")] = None,
        since: Annotated[datetime | None, Query(description="From this time (ISO 8601).")] = None,
        until: Annotated[datetime | None, Query(description="Before this time (ISO 8601).")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """The workspace's audit log, oldest first (admins: a caller that sees the whole workspace)."""
        if not caller.sees_workspace:
            raise ApiError(
                403, "admin_only", "the audit log is for the workspace's admins (auth.admin_roles)"
            )
        entries = await runtime.audit_entries(
            caller.workspace, user=user, action=action, since=_utc(since), until=_utc(until), limit=limit
        )
        return {"entries": entries}


def _utc(value: datetime | None) -> datetime | None:
    """A time without a zone is UTC's."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
