"""A client for ``orchestra serve``: ``Client`` (sync) and ``AsyncClient``, on httpx, with typed errors.

```python
from orchestra.client import Client

client = Client("http://127.0.0.1:8000", api_key="...")
reply = client.invoke("support", {"message": "What's the weather in London?"}, session_id="user-123")
follow_up = client.invoke("support", {"message": "What about Paris?"}, session_id="user-123")
for event in client.stream("support", "Hello"):
    print(event.event, event.data)
```

Every ``invoke`` sends an ``Idempotency-Key`` (a new one per call, or the one you pass) and retries what
may have failed half way with it: a lost connection or timeout, 503 (the storage is unavailable, or lost
an answer), 409 ``request_in_progress`` or ``session_conflict``, 500 ``internal``. The server answers a
repeated key from the first run, so a retry never stores a turn twice.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from pydantic import BaseModel, ConfigDict

from orchestra._ids import validate_id
from orchestra.errors import OrchestraError

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ClientError",
    "ConflictError",
    "InsufficientStorageError",
    "InvalidRequestError",
    "InvokeResult",
    "NotFoundError",
    "ServerError",
    "ServiceUnavailableError",
    "StreamEvent",
]


class ClientError(OrchestraError):
    """The server refused or failed a request; ``status``, ``code`` and ``message`` say how."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class AuthenticationError(ClientError):
    """401: the API key is missing or not valid."""


class NotFoundError(ClientError):
    """404: no such agent, session or run in this workspace."""


class ConflictError(ClientError):
    """409: another invocation of the session won; retry after ``retry_after`` seconds."""


class InvalidRequestError(ClientError):
    """400, 413 or 422: the request was malformed, too large, or asked for two modes at once."""


class ServerError(ClientError):
    """5xx: the server, or the run, failed."""


class ServiceUnavailableError(ServerError):
    """503: the server's storage is unavailable (``storage_unavailable``: nothing was stored) or lost an
    answer (``outcome_unknown``: repeat with the same Idempotency-Key to learn the outcome)."""


class InsufficientStorageError(ServerError):
    """507: the server's storage is full; the turn was not stored."""


_ERRORS: dict[int, type[ClientError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: InvalidRequestError,
    422: InvalidRequestError,
    503: ServiceUnavailableError,
    507: InsufficientStorageError,
}

_RETRIED = {409: {"session_conflict", "request_in_progress"}, 500: {"internal"}, 503: None}


def _retry_delay(response: httpx.Response | None, attempt: int) -> float | None:
    """How long to wait before repeating a request with its key (None: its answer is final)."""
    if response is not None:
        codes = _RETRIED.get(response.status_code, set())
        if codes is not None:
            try:
                code = response.json()["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = None
            if code not in codes:
                return None
        retry_after = response.headers.get("retry-after")
        if retry_after is not None:
            try:
                return min(float(retry_after), 30.0)
            except ValueError:
                pass
    return min(0.25 * 2.0**attempt, 5.0)


def _key_header(idempotency_key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}


class InvokeResult(BaseModel):
    """What an invocation answered."""

    model_config = ConfigDict(extra="allow")

    output: Any
    session_id: str | None = None
    run_id: str
    usage: dict[str, int] = {}
    status: str = "completed"
    resumed: bool = False


@dataclass(frozen=True)
class StreamEvent:
    """One server-sent event: ``text``, ``tool_call``, ``tool_result``, ``node_start``, ``node_stop``,
    ``handoff``, and last ``result`` (or ``error``)."""

    event: str
    data: Any


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", response.text[:500]
    retry = response.headers.get("retry-after")
    cls = _ERRORS.get(response.status_code, ServerError if response.status_code >= 500 else ClientError)
    raise cls(response.status_code, code, message, float(retry) if retry else None)


def _segment(value: str, what: str) -> str:
    """An id as exactly one URL path segment.

    Ids the server would refuse are refused here, before any request (an id like
    ``"../../other-agent/sessions/x"`` must never reach another resource), and the id is quoted anyway.

    Raises:
        ValueError: the id is not 1-128 letters, digits, ``.``, ``_`` or ``-`` (not starting with ``.``).
    """
    return quote(validate_id(value, what), safe="")


def _filters(agent_id: str | None, session_id: str | None) -> dict[str, str | None]:
    for value, what in ((agent_id, "agent_id"), (session_id, "session_id")):
        if value is not None:
            validate_id(value, what)
    return {"agent_id": agent_id, "session_id": session_id}


def _body(input: Any, session_id: str | None, history: list[dict[str, str]] | None) -> dict[str, Any]:
    if session_id is not None:
        validate_id(session_id, "session_id")
    body: dict[str, Any] = {"input": input}
    if session_id is not None:
        body["session_id"] = session_id
    if history is not None:
        body["history"] = history
    return body


def _checked(event: StreamEvent) -> StreamEvent:
    """A streamed turn that lost its session to another writer raises ``ConflictError``, as invoke does."""
    if event.event == "error" and isinstance(event.data, dict):
        error = event.data.get("error") or {}
        if error.get("code") == "session_conflict":
            raise ConflictError(409, "session_conflict", str(error.get("message")), error.get("retry_after"))
    return event


class _SSEParser:
    """Server-sent events, one line at a time."""

    def __init__(self) -> None:
        self.name, self.data = "message", ""

    def feed(self, line: str) -> StreamEvent | None:
        if line.startswith("event:"):
            self.name = line[6:].strip()
        elif line.startswith("data:"):
            self.data += line[5:].strip()
        elif not line and self.data:
            event = StreamEvent(self.name, json.loads(self.data))
            self.name, self.data = "message", ""
            return event
        return None


class Client:
    """A synchronous client.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        api_key: the workspace's API key.
        timeout: seconds to wait for an answer (runs can be long).
        retries: how many times ``invoke`` repeats a request that may have failed half way (with its
            Idempotency-Key, so that it runs once).
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 300.0, retries: int = 3) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )
        self.retries = retries

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _get(self, path: str, **params: Any) -> Any:
        response = self._http.get(path, params={k: v for k, v in params.items() if v is not None})
        _raise_for(response)
        return response.json()

    def invoke(
        self,
        agent_id: str,
        input: Any,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> InvokeResult:
        """Invoke an agent: session mode (``session_id``), stateless (``history``) or neither.

        The request carries ``idempotency_key`` (a new one if not given) and is repeated with it when it
        may have failed half way (see the module docstring), so the turn runs once."""
        url = f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/invoke"
        body, headers = _body(input, session_id, history), _key_header(idempotency_key)
        for attempt in range(self.retries + 1):
            try:
                response: httpx.Response | None = self._http.post(url, json=body, headers=headers)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                response = None
            if response is not None and response.status_code < 400:
                return InvokeResult.model_validate(response.json())
            delay = _retry_delay(response, attempt) if attempt < self.retries else None
            if delay is None:
                assert response is not None
                _raise_for(response)
            time.sleep(delay or 0)
        raise AssertionError("unreachable")

    def stream(
        self,
        agent_id: str,
        input: Any,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Iterator[StreamEvent]:
        """Invoke with ``?stream=true`` and yield the events as they come (with an Idempotency-Key: a
        repeat with the same key yields only the first run's last event)."""
        url = f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/invoke"
        with self._http.stream(
            "POST",
            url,
            params={"stream": "true"},
            json=_body(input, session_id, history),
            headers=_key_header(idempotency_key),
        ) as response:
            if response.status_code >= 400:
                response.read()
                _raise_for(response)
            parser = _SSEParser()
            for line in response.iter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield _checked(event)

    def resume(self, agent_id: str, session_id: str) -> InvokeResult:
        """Finish what a session left open (a turn cut by a crash, an unfinished run); ``resumed`` is
        true in the answer. ``ConflictError`` (``nothing_to_resume``) if there is nothing."""
        response = self._http.post(
            f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/sessions/{_segment(session_id, 'session_id')}/resume"
        )
        _raise_for(response)
        return InvokeResult.model_validate(response.json())

    def agents(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/agents")["agents"])

    def sessions(self, agent_id: str) -> list[dict[str, Any]]:
        return list(self._get(f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/sessions")["sessions"])

    def session(self, agent_id: str, session_id: str) -> dict[str, Any]:
        return dict(
            self._get(
                f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/sessions/{_segment(session_id, 'session_id')}"
            )
        )

    def delete_session(self, agent_id: str, session_id: str) -> None:
        _raise_for(
            self._http.delete(
                f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/sessions/{_segment(session_id, 'session_id')}"
            )
        )

    def runs(self, agent_id: str | None = None, session_id: str | None = None) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/runs", **_filters(agent_id, session_id))["runs"])

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self._get(f"/api/v1/runs/{_segment(run_id, 'run_id')}"))


class AsyncClient:
    """An async client (the same methods as :class:`Client`, awaited)."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 300.0, retries: int = 3) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )
        self.retries = retries

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _get(self, path: str, **params: Any) -> Any:
        response = await self._http.get(path, params={k: v for k, v in params.items() if v is not None})
        _raise_for(response)
        return response.json()

    async def invoke(
        self,
        agent_id: str,
        input: Any,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> InvokeResult:
        url = f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/invoke"
        body, headers = _body(input, session_id, history), _key_header(idempotency_key)
        for attempt in range(self.retries + 1):
            try:
                response: httpx.Response | None = await self._http.post(url, json=body, headers=headers)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                response = None
            if response is not None and response.status_code < 400:
                return InvokeResult.model_validate(response.json())
            delay = _retry_delay(response, attempt) if attempt < self.retries else None
            if delay is None:
                assert response is not None
                _raise_for(response)
            await anyio.sleep(delay or 0)
        raise AssertionError("unreachable")

    async def stream(
        self,
        agent_id: str,
        input: Any,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        url = f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/invoke"
        body, headers = _body(input, session_id, history), _key_header(idempotency_key)
        async with self._http.stream(
            "POST", url, params={"stream": "true"}, json=body, headers=headers
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                _raise_for(response)
            parser = _SSEParser()
            async for line in response.aiter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield _checked(event)

    async def resume(self, agent_id: str, session_id: str) -> InvokeResult:
        response = await self._http.post(
            f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/sessions/{_segment(session_id, 'session_id')}/resume"
        )
        _raise_for(response)
        return InvokeResult.model_validate(response.json())

    async def agents(self) -> list[dict[str, Any]]:
        return list((await self._get("/api/v1/agents"))["agents"])

    async def sessions(self, agent_id: str) -> list[dict[str, Any]]:
        return list(
            (await self._get(f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/sessions"))["sessions"]
        )

    async def session(self, agent_id: str, session_id: str) -> dict[str, Any]:
        return dict(
            await self._get(
                f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/sessions/{_segment(session_id, 'session_id')}"
            )
        )

    async def delete_session(self, agent_id: str, session_id: str) -> None:
        _raise_for(
            await self._http.delete(
                f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/sessions/{_segment(session_id, 'session_id')}"
            )
        )

    async def runs(self, agent_id: str | None = None, session_id: str | None = None) -> list[dict[str, Any]]:
        return list((await self._get("/api/v1/runs", **_filters(agent_id, session_id)))["runs"])

    async def run(self, run_id: str) -> dict[str, Any]:
        return dict(await self._get(f"/api/v1/runs/{_segment(run_id, 'run_id')}"))
