"""``client.memory``: the memory routes of ``orchestra serve`` (put, get, search, delete, namespaces).

The requests are built here, with no I/O, once for both clients; ``Client`` and ``AsyncClient`` send
them (``send(method, url, params, body)``, raising the client's errors: a missing item is a
``NotFoundError``). Every namespace is the caller's own: the server puts it under the namespace the
API key (or the user) is bound to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import quote

from orchestra._ids import validate_id

__all__ = ["AsyncMemoryCalls", "MemoryCalls"]

Request = tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]


def _namespace(namespace: Sequence[str] | str) -> list[str]:
    parts = [namespace] if isinstance(namespace, str) else list(namespace)
    return [validate_id(part, "namespace part") for part in parts]


def _item(namespace: Sequence[str] | str, key: str) -> tuple[str, dict[str, Any]]:
    url = f"/api/v1/memory/items/{quote(validate_id(key, 'key'), safe='')}"
    parts = _namespace(namespace)
    return url, {"namespace": "/".join(parts)} if parts else {}


def put_request(
    namespace: Sequence[str] | str, key: str, value: dict[str, Any], ttl: float | None
) -> Request:
    url, params = _item(namespace, key)
    return "PUT", url, params, {"value": value, "ttl": ttl}


def get_request(namespace: Sequence[str] | str, key: str) -> Request:
    return ("GET", *_item(namespace, key), None)


def delete_request(namespace: Sequence[str] | str, key: str) -> Request:
    return ("DELETE", *_item(namespace, key), None)


def search_request(
    namespace: Sequence[str] | str, query: str | None, filter: dict[str, Any] | None, limit: int
) -> Request:
    body = {"namespace": _namespace(namespace), "query": query, "filter": filter, "limit": limit}
    return "POST", "/api/v1/memory/search", None, body


def namespaces_request(prefix: Sequence[str] | str, limit: int) -> Request:
    parts = _namespace(prefix)
    params: dict[str, Any] = {"limit": limit, **({"prefix": "/".join(parts)} if parts else {})}
    return "GET", "/api/v1/memory/namespaces", params, None


class MemoryCalls:
    """The memory calls of a ``Client`` (``client.memory``)."""

    def __init__(self, send: Callable[[str, str, dict[str, Any] | None, dict[str, Any] | None], Any]) -> None:
        self._send = send

    def put(
        self, namespace: Sequence[str] | str, key: str, value: dict[str, Any], *, ttl: float | None = None
    ) -> str:
        """Store ``value`` under ``namespace``/``key``; returns its version."""
        return str(self._send(*put_request(namespace, key, value, ttl))["version"])

    def get(self, namespace: Sequence[str] | str, key: str) -> dict[str, Any]:
        """The item (``NotFoundError`` when there is none)."""
        return dict(self._send(*get_request(namespace, key)))

    def delete(self, namespace: Sequence[str] | str, key: str) -> None:
        """Delete the item (``NotFoundError`` when there was none)."""
        self._send(*delete_request(namespace, key))

    def search(
        self,
        namespace: Sequence[str] | str = (),
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
    ) -> list[dict[str, Any]]:
        """Items under a namespace prefix, best first (by ``query``), matched by ``filter``."""
        return list(self._send(*search_request(namespace, query, filter, limit))["items"])

    def namespaces(self, prefix: Sequence[str] | str = (), *, limit: int = 100) -> list[list[str]]:
        """The namespaces that hold items, under ``prefix``."""
        return list(self._send(*namespaces_request(prefix, limit))["namespaces"])


class AsyncMemoryCalls:
    """The memory calls of an ``AsyncClient`` (``client.memory``): as ``MemoryCalls``, awaited."""

    def __init__(
        self, send: Callable[[str, str, dict[str, Any] | None, dict[str, Any] | None], Awaitable[Any]]
    ) -> None:
        self._send = send

    async def put(
        self, namespace: Sequence[str] | str, key: str, value: dict[str, Any], *, ttl: float | None = None
    ) -> str:
        return str((await self._send(*put_request(namespace, key, value, ttl)))["version"])

    async def get(self, namespace: Sequence[str] | str, key: str) -> dict[str, Any]:
        return dict(await self._send(*get_request(namespace, key)))

    async def delete(self, namespace: Sequence[str] | str, key: str) -> None:
        await self._send(*delete_request(namespace, key))

    async def search(
        self,
        namespace: Sequence[str] | str = (),
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
    ) -> list[dict[str, Any]]:
        return list((await self._send(*search_request(namespace, query, filter, limit)))["items"])

    async def namespaces(self, prefix: Sequence[str] | str = (), *, limit: int = 100) -> list[list[str]]:
        return list((await self._send(*namespaces_request(prefix, limit)))["namespaces"])
