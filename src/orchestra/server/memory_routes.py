"""The memory routes: each maps a request to one call of the workspace's memory (``hosting/memory.py``).

| route | what |
| --- | --- |
| ``PUT /api/v1/memory/items/{key}?namespace=a/b`` | put ``{"value": {...}, "ttl": seconds}``: 200 with the version |
| ``GET /api/v1/memory/items/{key}?namespace=a/b`` | the item, or 404 |
| ``DELETE /api/v1/memory/items/{key}?namespace=a/b`` | 204, or 404 when there was none |
| ``POST /api/v1/memory/search`` | ``{"namespace": [...], "query", "filter", "limit"}``: items, best first |
| ``GET /api/v1/memory/namespaces?prefix=a&limit=100`` | the namespaces that hold items |

A namespace is written ``a/b`` in a query and ``["a", "b"]`` in a body; each part is an id by the
storage's rule. Every namespace is the caller's: it is under the root the caller is bound to
(``caller_of``: today the API key's workspace, later the user auth names), and answers name namespaces
without that root. Another caller's item answers 404, never 403: its existence is not told.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from orchestra.errors import ConfigurationError
from orchestra.hosting import RunService
from orchestra.hosting.identity import memory_subject
from orchestra.hosting.memory import HostedItem
from orchestra.server._api import ID_PATH, STORABLE_ID, ApiError, Workspace, _errors

__all__ = ["Caller", "caller_of", "mount_memory"]

Caller = tuple[str, str | None]
"""A caller's workspace and user subject (None: a workspace-wide API key, which stands for the workspace)."""


def caller_of(ws: str) -> Caller:
    """The caller as auth gives it: the workspace, and the user whose memory it is (``memory_subject``)."""
    return ws, memory_subject()


def _namespace(text: str | None) -> tuple[str, ...]:
    return tuple(text.split("/")) if text else ()


PART = STORABLE_ID[1:-1]
NAMESPACE_PATTERN = f"^({PART})(/{PART})*$"
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
FILTER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "JSON fields (dotted paths) to match: a value (equality), or operators "
    + ", ".join(OPERATORS)
    + ' (e.g. {"tier": {"$gte": 2}}).',
    "additionalProperties": {
        "anyOf": [
            {"type": ["string", "number", "integer", "boolean", "null", "array"]},
            {"type": "object", "propertyNames": {"pattern": "^[^$]"}},
            {
                "type": "object",
                "properties": {op: ({"type": "array"} if op in ("$in", "$nin") else {}) for op in OPERATORS},
                "additionalProperties": False,
            },
        ]
    },
}


def _refused(exc: Exception, field: str) -> ApiError:
    return ApiError(422, f"invalid_{field}", str(exc))


class PutBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: dict[str, Any] = Field(description="The item's JSON value.")
    ttl: float | None = Field(default=None, gt=0, description="Seconds until the item expires.")


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    namespace: list[Annotated[str, Field(pattern=STORABLE_ID)]] = Field(
        default_factory=list, max_length=32, description="The namespace prefix to search under."
    )
    query: str | None = Field(default=None, max_length=10_000, description="Rank by meaning against this.")
    filter: Annotated[dict[str, Any] | None, WithJsonSchema({"anyOf": [FILTER_SCHEMA, {"type": "null"}]})] = (
        None
    )
    limit: int = Field(default=10, ge=1, le=100)


class MemoryItemOut(BaseModel):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: str | None = Field(default=None, description="When it was first written (ISO 8601, UTC).")
    updated_at: str | None = Field(default=None, description="When it was last written (ISO 8601, UTC).")
    score: float | None = None


class MemoryItems(BaseModel):
    items: list[MemoryItemOut]


class Namespaces(BaseModel):
    namespaces: list[list[str]]


class Stored(BaseModel):
    namespace: list[str]
    key: str
    version: str


NamespaceQuery = Annotated[
    str | None,
    Query(
        max_length=4096,
        pattern=NAMESPACE_PATTERN,
        description="The namespace, as a/b (each part an id); none: the caller's own root.",
    ),
]


def mount_memory(app: FastAPI, runtime: RunService) -> None:
    """Add the memory routes (see the module docstring)."""
    memory = runtime.workspaces.memory

    async def _call(coro: Any, field: str = "namespace") -> Any:
        try:
            return await coro
        except ConfigurationError as exc:
            raise _refused(exc, field) from None

    @app.put(
        "/api/v1/memory/items/{key}",
        response_model=Stored,
        responses=_errors(400, 401, 413, 422, 500, 503, 507),
    )
    async def put_item(
        key: Annotated[str, ID_PATH], body: PutBody, ws: Workspace, namespace: NamespaceQuery = None
    ) -> dict[str, Any]:
        """Put an item in one of the caller's namespaces (replacing the item under its key)."""
        workspace, subject = caller_of(ws)
        parts = _namespace(namespace)
        version = await _call(memory.put(workspace, subject, parts, key, body.value, body.ttl))
        return {"namespace": list(parts), "key": key, "version": str(version)}

    @app.get(
        "/api/v1/memory/items/{key}", response_model=MemoryItemOut, responses=_errors(401, 404, 422, 500)
    )
    async def get_item(
        key: Annotated[str, ID_PATH], ws: Workspace, namespace: NamespaceQuery = None
    ) -> dict[str, Any]:
        """One of the caller's items."""
        workspace, subject = caller_of(ws)
        item: HostedItem | None = await _call(memory.get(workspace, subject, _namespace(namespace), key))
        if item is None:
            raise ApiError(404, "unknown_memory", f"no item {key!r} in namespace {namespace or ''!r}")
        return item.plain()

    @app.delete("/api/v1/memory/items/{key}", status_code=204, responses=_errors(401, 404, 422, 500, 503))
    async def delete_item(
        key: Annotated[str, ID_PATH], ws: Workspace, namespace: NamespaceQuery = None
    ) -> Response:
        """Delete one of the caller's items."""
        workspace, subject = caller_of(ws)
        if not await _call(memory.delete(workspace, subject, _namespace(namespace), key)):
            raise ApiError(404, "unknown_memory", f"no item {key!r} in namespace {namespace or ''!r}")
        return Response(status_code=204)

    @app.post("/api/v1/memory/search", response_model=MemoryItems, responses=_errors(400, 401, 413, 422, 500))
    async def search(body: SearchBody, ws: Workspace) -> dict[str, Any]:
        """The caller's items under a namespace prefix, ranked by ``query`` when given, matched by ``filter``."""
        workspace, subject = caller_of(ws)
        try:
            items = await memory.search(
                workspace, subject, body.namespace, body.query, body.filter, body.limit
            )
        except (ConfigurationError, ValueError) as exc:
            raise _refused(exc, "search") from None
        return {"items": [item.plain() for item in items]}

    @app.get("/api/v1/memory/namespaces", response_model=Namespaces, responses=_errors(401, 422, 500))
    async def namespaces(
        ws: Workspace,
        prefix: NamespaceQuery = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """The caller's namespaces that hold items, under ``prefix``."""
        workspace, subject = caller_of(ws)
        found = await _call(memory.list_namespaces(workspace, subject, _namespace(prefix), limit))
        return {"namespaces": [list(namespace) for namespace in found]}
