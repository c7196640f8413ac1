"""The routes of many tenants: what a caller has spent (``GET /api/v1/usage``) and, for admins, the audit
log (``GET /api/v1/audit``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from orchestra.hosting import RunService
from orchestra.server._api import Caller, _errors

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


def mount_tenant_routes(app: FastAPI, runtime: RunService) -> None:
    """Add the routes of the module docstring to ``app``."""

    @app.get("/api/v1/usage", response_model=UsageAnswer, responses=_errors(401, 500))
    async def usage(caller: Caller) -> dict[str, Any]:
        """What the caller's quotas have spent this period (its workspace's, and its own as a user)."""
        quotas = await runtime.usage(caller.workspace)
        return {"workspace": caller.workspace, "user": caller.user, "quotas": quotas}
