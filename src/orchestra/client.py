"""A client for ``orchestra serve``: ``Client`` (sync) and ``AsyncClient``, on httpx, with typed errors.

```python
from orchestra.client import Client

client = Client("http://127.0.0.1:8000", api_key="...")
reply = client.invoke("support", {"message": "What's the weather in London?"}, session_id="user-123")
follow_up = client.invoke("support", {"message": "What about Paris?"}, session_id="user-123")
for event in client.stream("support", "Hello"):
    print(event.id, event.event, event.data)

run = client.start_run("support", "A long task", session_id="user-123")   # 202: it runs in the background
for event in client.stream(run_id=run.run_id):                           # reconnects on its own
    print(event.id, event.event)
record = client.wait(run.run_id)
```

Every ``invoke``, ``respond`` and ``start_run`` sends an ``Idempotency-Key`` (a new one per call, or the
one you pass) and retries what may have failed half way with it: a lost connection or timeout, 503 (the
storage is unavailable, or lost an answer), 409 ``request_in_progress`` or ``session_conflict``, 500
``internal``. The server answers a repeated key from the first run, so a retry never stores a turn twice.
Following a run's stream reconnects after a lost connection with ``Last-Event-ID``: every event comes
once, in order. A server that cannot be reached, or a connection lost for good, raises
``ServerUnreachableError`` naming the server's URL, never httpx's own errors.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from pydantic import BaseModel, ConfigDict

from orchestra._ids import validate_id
from orchestra.client_memory import AsyncMemoryCalls, MemoryCalls
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
    "RateLimitError",
    "RunInfo",
    "ServerError",
    "ServerUnreachableError",
    "ServiceUnavailableError",
    "StreamEvent",
]


class ClientError(OrchestraError):
    """The server refused or failed a request, or could not be reached; ``status`` (0: no HTTP answer),
    ``code`` and ``message`` say how."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}" if status else message)
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


class RateLimitError(ClientError):
    """429: the session's queue is full (``queue_full``); send the message later."""


class ServerUnreachableError(ClientError, ConnectionError):
    """No answer came from the server at ``url`` (``status`` 0), after the client's retries.

    ``code`` says how: ``connect_failed`` (nothing reached it: is it running there?), ``timeout`` or
    ``connection_lost`` (a POST that was sent may have run: repeat it with the same
    ``idempotency_key`` to learn its outcome). httpx's error is the ``__cause__``.
    """

    def __init__(self, url: str, code: str, message: str) -> None:
        super().__init__(0, code, message)
        self.url = url


def _unreachable(url: str, exc: httpx.TransportError) -> ServerUnreachableError:
    """httpx's transport error as the client's own, naming the server and what to do."""
    try:
        method, request = exc.request.method, f"{exc.request.method} {exc.request.url.path}"
    except RuntimeError:  # an error raised before there was a request
        method, request = "", "a request"
    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return ServerUnreachableError(
            url,
            "connect_failed",
            f"cannot reach the server at {url} for {request} ({reason}): is orchestra serve running there?",
        )
    code = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection_lost"
    what = (
        "it may have run: repeat it with the same idempotency_key to learn its outcome"
        if method == "POST"
        else "try again"
    )
    return ServerUnreachableError(
        url, code, f"no answer from the server at {url} to {request} ({reason}); {what}"
    )


@contextlib.contextmanager
def _answered(url: str) -> Iterator[None]:
    """Raise httpx's transport errors as ``ServerUnreachableError`` naming ``url``."""
    try:
        yield
    except httpx.TransportError as exc:
        raise _unreachable(url, exc) from exc


_ERRORS: dict[int, type[ClientError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: InvalidRequestError,
    429: RateLimitError,
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
    interrupts: list[dict[str, Any]] = []
    stopped: dict[str, Any] | None = None


class RunInfo(BaseModel):
    """A run as a listing or a 202 answer shows it (``run`` gives the whole record)."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    agent_id: str
    status: str
    session_id: str | None = None


@dataclass(frozen=True)
class StreamEvent:
    """One server-sent event: ``status``, ``state`` (the run's agent or shared state, whole: at the start
    unless empty, and after each change), ``text``, ``tool_call``, ``tool_result``, ``node_start``, ``node_stop``,
    ``handoff``, ``truncated``, and last ``result`` (or ``error``); ``id`` is its place in
    the run's log (None for an event that is not kept, such as a repeat's answer)."""

    event: str
    data: Any
    id: str | None = None

    @property
    def last(self) -> bool:
        """Whether this is a run's last event."""
        return self.event in ("result", "error")


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


def _search(
    status: str | list[str] | None,
    since: str | datetime | None,
    until: str | datetime | None,
    metadata: dict[str, str] | None,
    order: str | None,
    cursor: str | None,
) -> dict[str, Any]:
    """The query parameters of a search (GET /api/v1/runs, /api/v1/sessions)."""
    return {
        "status": [status] if isinstance(status, str) else status,
        "since": since.isoformat() if isinstance(since, datetime) else since,
        "until": until.isoformat() if isinstance(until, datetime) else until,
        "metadata": [f"{k}:{v}" for k, v in metadata.items()] if metadata else None,
        "order": order,
        "cursor": cursor,
    }


def _body(
    input: Any,
    session_id: str | None,
    history: list[dict[str, str]] | None,
    *,
    responses: Any = None,
    on_busy: str | None = None,
    webhook: str | None = None,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    if session_id is not None:
        validate_id(session_id, "session_id")
    body: dict[str, Any] = {} if responses is not None else {"input": input}
    for name, value in (
        ("session_id", session_id),
        ("history", history),
        ("responses", _responses(responses)),
        ("on_busy", on_busy),
        ("webhook", webhook),
        ("metadata", metadata),
    ):
        if value is not None:
            body[name] = value
    return body


def _responses(responses: Any) -> list[dict[str, Any]] | None:
    """Answers as the server takes them: ``{interrupt id: response}`` or a list of
    ``{"interrupt_id", "response"}``."""
    if responses is None or isinstance(responses, list):
        return responses
    return [{"interrupt_id": key, "response": value} for key, value in dict(responses).items()]


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
        self.id: str | None = None

    def feed(self, line: str) -> StreamEvent | None:
        if line.startswith("id:"):
            self.id = line[3:].strip()
        elif line.startswith("event:"):
            self.name = line[6:].strip()
        elif line.startswith("data:"):
            self.data += line[5:].strip()
        elif not line and self.data:
            event = StreamEvent(self.name, json.loads(self.data), self.id)
            self.name, self.data, self.id = "message", "", None
            return event
        return None


def _agent_url(agent_id: str, what: str) -> str:
    return f"/api/v1/agents/{_segment(agent_id, 'agent_id')}/{what}"


def _schedule_url(schedule_id: str, what: str = "") -> str:
    return f"/api/v1/schedules/{_segment(schedule_id, 'schedule_id')}" + (f"/{what}" if what else "")


def _run_url(run_id: str, what: str = "") -> str:
    return f"/api/v1/runs/{_segment(run_id, 'run_id')}" + (f"/{what}" if what else "")


def _stream_headers(after: str | None) -> dict[str, str]:
    return {"Last-Event-ID": after} if after is not None else {}


class Client:
    """A synchronous client.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        api_key: the workspace's API key.
        timeout: seconds to wait for an answer (runs can be long).
        retries: how many times ``invoke``, ``respond`` and ``start_run`` repeat a request that may have
            failed half way (with its Idempotency-Key, so that it runs once), and how many times a run's
            stream reconnects in a row without getting an event.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 300.0, retries: int = 3) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )
        self.retries = retries
        self.memory = MemoryCalls(self._send)
        """The caller's memory: ``put``, ``get``, ``search``, ``delete``, ``namespaces``."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _get(self, path: str, **params: Any) -> Any:
        with _answered(self.base_url):
            response = self._http.get(path, params={k: v for k, v in params.items() if v is not None})
        _raise_for(response)
        return response.json()

    def _send(self, method: str, url: str, params: dict[str, Any] | None, body: dict[str, Any] | None) -> Any:
        with _answered(self.base_url):
            response = self._http.request(method, url, params=params, json=body)
        _raise_for(response)
        return response.json() if response.content else None

    def _post_once(self, url: str, body: dict[str, Any] | None, idempotency_key: str | None) -> Any:
        """POST with an Idempotency-Key, repeated while it may have failed half way (module docstring)."""
        headers = _key_header(idempotency_key)
        for attempt in range(self.retries + 1):
            try:
                response: httpx.Response | None = self._http.post(url, json=body, headers=headers)
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise _unreachable(self.base_url, exc) from exc
                response = None
            if response is not None and response.status_code < 400:
                return response.json()
            delay = _retry_delay(response, attempt) if attempt < self.retries else None
            if delay is None:
                assert response is not None
                _raise_for(response)
            time.sleep(delay or 0)
        raise AssertionError("unreachable")

    def invoke(
        self,
        agent_id: str,
        input: Any,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        *,
        idempotency_key: str | None = None,
        on_busy: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> InvokeResult:
        """Invoke an agent: session mode (``session_id``), stateless (``history``) or neither.

        ``on_busy`` says what to do if the session runs another run: ``reject`` (409), ``enqueue``,
        ``interrupt`` or ``rollback``. The request carries ``idempotency_key`` (a new one if not given)
        and is repeated with it when it may have failed half way, so the turn runs once. ``metadata``
        is kept in the run's record, to search runs by."""
        body = _body(input, session_id, history, on_busy=on_busy, metadata=metadata)
        return InvokeResult.model_validate(
            self._post_once(_agent_url(agent_id, "invoke"), body, idempotency_key)
        )

    def respond(
        self,
        agent_id: str,
        responses: dict[str, Any] | list[dict[str, Any]],
        *,
        session_id: str,
        idempotency_key: str | None = None,
        on_busy: str | None = None,
    ) -> InvokeResult:
        """Answer a session's open interrupts (``{interrupt id: answer}``, all or some) and wait for the
        run to go on; it answers ``interrupted`` again while questions stay open."""
        body = _body(None, session_id, None, responses=responses, on_busy=on_busy)
        return InvokeResult.model_validate(
            self._post_once(_agent_url(agent_id, "invoke"), body, idempotency_key)
        )

    def start_run(
        self,
        agent_id: str,
        input: Any = None,
        *,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        responses: dict[str, Any] | list[dict[str, Any]] | None = None,
        on_busy: str | None = None,
        webhook: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> RunInfo:
        """Start a run in the background (or answer interrupts in one); returns at once with its id."""
        body = _body(
            input,
            session_id,
            history,
            responses=responses,
            on_busy=on_busy,
            webhook=webhook,
            metadata=metadata,
        )
        return RunInfo.model_validate(self._post_once(_agent_url(agent_id, "runs"), body, idempotency_key))

    def stream(
        self,
        agent_id: str | None = None,
        input: Any = None,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        *,
        idempotency_key: str | None = None,
        on_busy: str | None = None,
        run_id: str | None = None,
        resume_from: str | None = None,
    ) -> Iterator[StreamEvent]:
        """Events as they come. With ``agent_id`` and ``input``: invoke with ``?stream=true`` (a repeat
        with the same key yields only the first run's last event). With ``run_id``: follow that run, from
        after event ``resume_from`` (its ``id``; all of it without), reconnecting after a lost connection
        with the last id seen, until its last event."""
        if run_id is not None:
            yield from self._follow(run_id, resume_from)
            return
        if agent_id is None:
            raise ValueError("stream() needs an agent_id and input, or a run_id")
        with (
            _answered(self.base_url),
            self._http.stream(
                "POST",
                _agent_url(agent_id, "invoke"),
                params={"stream": "true"},
                json=_body(input, session_id, history, on_busy=on_busy),
                headers=_key_header(idempotency_key),
            ) as response,
        ):
            if response.status_code >= 400:
                response.read()
                _raise_for(response)
            parser = _SSEParser()
            for line in response.iter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield _checked(event)

    def _follow(self, run_id: str, after: str | None) -> Iterator[StreamEvent]:
        url, failures = _run_url(run_id, "stream"), 0
        while True:
            try:
                with self._http.stream("GET", url, headers=_stream_headers(after)) as response:
                    if response.status_code >= 400:
                        response.read()
                        _raise_for(response)
                    parser = _SSEParser()
                    for line in response.iter_lines():
                        got = parser.feed(line)
                        if got is None:
                            continue
                        failures, after = 0, got.id or after
                        yield got
                        if got.last:
                            return
            except httpx.TransportError as exc:
                failures += 1
                if failures > self.retries:
                    raise _unreachable(self.base_url, exc) from exc
                time.sleep(min(0.25 * 2.0**failures, 5.0))
                continue
            return  # the server ended the stream without a last event: nothing more to follow

    def wait(self, run_id: str, *, timeout: float | None = None) -> dict[str, Any]:
        """The run's record once it has ended (read every 0.1 s at first, then less often, up to 2 s).

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.1
        while True:
            record = self.run(run_id)
            if record["status"] not in ("queued", "executing"):
                return record
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not end within {timeout} s")
            time.sleep(pause)
            pause = min(pause * 1.5, 2.0)

    def cancel(self, run_id: str) -> RunInfo:
        """Stop a run (it is saved ``interrupted`` and can be resumed); ``wait`` tells when it has."""
        return RunInfo.model_validate(self._post_once(_run_url(run_id, "cancel"), None, None))

    def resume_run(self, run_id: str) -> RunInfo:
        """Start a cancelled, failed or stranded run again, as a new background run."""
        return RunInfo.model_validate(self._post_once(_run_url(run_id, "resume"), None, None))

    def send_event(
        self, run_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Send an event to a run's session (docs/waiting.md): a wait for ``name`` takes it exactly once.
        Give ``idempotency_key`` to make a repeat safe (``duplicate`` is then true in the answer)."""
        body = {"name": name, "payload": payload}
        return dict(self._post_once(_run_url(run_id, "events"), body, idempotency_key))

    def resume(self, agent_id: str, session_id: str) -> InvokeResult:
        """Finish what a session left open (a turn cut by a crash, an unfinished run); ``resumed`` is
        true in the answer. ``ConflictError`` (``nothing_to_resume``) if there is nothing."""
        url = f"{_agent_url(agent_id, 'sessions')}/{_segment(session_id, 'session_id')}/resume"
        with _answered(self.base_url):
            response = self._http.post(url)
        _raise_for(response)
        return InvokeResult.model_validate(response.json())

    def agents(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/agents")["agents"])

    def sessions(self, agent_id: str) -> list[dict[str, Any]]:
        return list(self._get(_agent_url(agent_id, "sessions"))["sessions"])

    def session(self, agent_id: str, session_id: str) -> dict[str, Any]:
        """A session: its whole conversation (``messages``; the model is given
        ``messages[context_start:]``), or a pipeline's run and nodes."""
        return dict(self._get(f"{_agent_url(agent_id, 'sessions')}/{_segment(session_id, 'session_id')}"))

    def delete_session(self, agent_id: str, session_id: str) -> None:
        url = f"{_agent_url(agent_id, 'sessions')}/{_segment(session_id, 'session_id')}"
        with _answered(self.base_url):
            response = self._http.delete(url)
        _raise_for(response)

    def runs(
        self,
        agent_id: str | None = None,
        session_id: str | None = None,
        limit: int | None = None,
        **search: Any,
    ) -> list[dict[str, Any]]:
        """Runs, newest first: the first page of ``search_runs``."""
        return list(self.search_runs(agent_id, session_id, limit=limit, **search)["runs"])

    def search_runs(
        self,
        agent_id: str | None = None,
        session_id: str | None = None,
        *,
        status: str | list[str] | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        metadata: dict[str, str] | None = None,
        order: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A page of runs that match every filter given: ``{"runs": [...], "next_cursor": ...}`` (pass
        ``next_cursor`` as ``cursor`` for the next page; None after the last)."""
        params = _search(status, since, until, metadata, order, cursor)
        return dict(self._get("/api/v1/runs", **_filters(agent_id, session_id), limit=limit, **params))

    def search_sessions(
        self,
        agent_id: str | None = None,
        *,
        status: str | list[str] | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        metadata: dict[str, str] | None = None,
        order: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A page of sessions (each with its latest run's status and metadata) that match every filter:
        ``{"sessions": [...], "next_cursor": ...}``."""
        params = _search(status, since, until, metadata, order, cursor)
        return dict(self._get("/api/v1/sessions", **_filters(agent_id, None), limit=limit, **params))

    def schedules(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/schedules")["schedules"])

    def schedule(self, schedule_id: str, ticks: int = 20) -> dict[str, Any]:
        """A schedule and its latest ``ticks`` tick records."""
        return dict(self._get(_schedule_url(schedule_id), ticks=ticks))

    def create_schedule(self, schedule_id: str, agent_id: str, cron: str, **fields: Any) -> dict[str, Any]:
        """Create a schedule (``fields``: timezone, input, session, session_id, missed, ...)."""
        return dict(
            self._send(
                "POST",
                "/api/v1/schedules",
                None,
                {"id": schedule_id, "agent": agent_id, "cron": cron, **fields},
            )
        )

    def pause_schedule(self, schedule_id: str) -> dict[str, Any]:
        return dict(self._send("POST", _schedule_url(schedule_id, "pause"), None, None))

    def resume_schedule(self, schedule_id: str) -> dict[str, Any]:
        return dict(self._send("POST", _schedule_url(schedule_id, "resume"), None, None))

    def run_schedule(self, schedule_id: str) -> RunInfo:
        """Start the schedule's run now (202): the run, to follow like any background run."""
        return RunInfo.model_validate(self._send("POST", _schedule_url(schedule_id, "run"), None, None))

    def delete_schedule(self, schedule_id: str) -> None:
        self._send("DELETE", _schedule_url(schedule_id), None, None)

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self._get(_run_url(run_id)))


class AsyncClient:
    """An async client: the same methods as :class:`Client`, awaited (``stream`` is an async iterator).

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        api_key: the workspace's API key.
        timeout: seconds to wait for an answer (runs can be long).
        retries: how many times ``invoke``, ``respond`` and ``start_run`` repeat a request that may have
            failed half way (with its Idempotency-Key, so that it runs once), and how many times a run's
            stream reconnects in a row without getting an event.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 300.0, retries: int = 3) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )
        self.retries = retries
        self.memory = AsyncMemoryCalls(self._send)
        """The caller's memory, as ``Client.memory``, awaited."""

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _get(self, path: str, **params: Any) -> Any:
        with _answered(self.base_url):
            response = await self._http.get(path, params={k: v for k, v in params.items() if v is not None})
        _raise_for(response)
        return response.json()

    async def _send(
        self, method: str, url: str, params: dict[str, Any] | None, body: dict[str, Any] | None
    ) -> Any:
        with _answered(self.base_url):
            response = await self._http.request(method, url, params=params, json=body)
        _raise_for(response)
        return response.json() if response.content else None

    async def _post_once(self, url: str, body: dict[str, Any] | None, idempotency_key: str | None) -> Any:
        """POST with an Idempotency-Key, repeated while it may have failed half way (module docstring)."""
        headers = _key_header(idempotency_key)
        for attempt in range(self.retries + 1):
            try:
                response: httpx.Response | None = await self._http.post(url, json=body, headers=headers)
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise _unreachable(self.base_url, exc) from exc
                response = None
            if response is not None and response.status_code < 400:
                return response.json()
            delay = _retry_delay(response, attempt) if attempt < self.retries else None
            if delay is None:
                assert response is not None
                _raise_for(response)
            await anyio.sleep(delay or 0)
        raise AssertionError("unreachable")

    async def invoke(
        self,
        agent_id: str,
        input: Any,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        *,
        idempotency_key: str | None = None,
        on_busy: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> InvokeResult:
        """Invoke an agent: session mode (``session_id``), stateless (``history``) or neither.

        ``on_busy`` says what to do if the session runs another run: ``reject`` (409), ``enqueue``,
        ``interrupt`` or ``rollback``. The request carries ``idempotency_key`` (a new one if not given)
        and is repeated with it when it may have failed half way, so the turn runs once. ``metadata``
        is kept in the run's record, to search runs by."""
        body = _body(input, session_id, history, on_busy=on_busy, metadata=metadata)
        return InvokeResult.model_validate(
            await self._post_once(_agent_url(agent_id, "invoke"), body, idempotency_key)
        )

    async def respond(
        self,
        agent_id: str,
        responses: dict[str, Any] | list[dict[str, Any]],
        *,
        session_id: str,
        idempotency_key: str | None = None,
        on_busy: str | None = None,
    ) -> InvokeResult:
        """Answer a session's open interrupts (``{interrupt id: answer}``, all or some) and wait for the
        run to go on; it answers ``interrupted`` again while questions stay open."""
        body = _body(None, session_id, None, responses=responses, on_busy=on_busy)
        return InvokeResult.model_validate(
            await self._post_once(_agent_url(agent_id, "invoke"), body, idempotency_key)
        )

    async def start_run(
        self,
        agent_id: str,
        input: Any = None,
        *,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        responses: dict[str, Any] | list[dict[str, Any]] | None = None,
        on_busy: str | None = None,
        webhook: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> RunInfo:
        """Start a run in the background (or answer interrupts in one); returns at once with its id."""
        body = _body(
            input,
            session_id,
            history,
            responses=responses,
            on_busy=on_busy,
            webhook=webhook,
            metadata=metadata,
        )
        return RunInfo.model_validate(
            await self._post_once(_agent_url(agent_id, "runs"), body, idempotency_key)
        )

    async def stream(
        self,
        agent_id: str | None = None,
        input: Any = None,
        session_id: str | None = None,
        history: list[dict[str, str]] | None = None,
        *,
        idempotency_key: str | None = None,
        on_busy: str | None = None,
        run_id: str | None = None,
        resume_from: str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Events as they come. With ``agent_id`` and ``input``: invoke with ``?stream=true`` (a repeat
        with the same key yields only the first run's last event). With ``run_id``: follow that run, from
        after event ``resume_from`` (its ``id``; all of it without), reconnecting after a lost connection
        with the last id seen, until its last event."""
        if run_id is not None:
            async for followed in self._follow(run_id, resume_from):
                yield followed
            return
        if agent_id is None:
            raise ValueError("stream() needs an agent_id and input, or a run_id")
        with _answered(self.base_url):
            async with self._http.stream(
                "POST",
                _agent_url(agent_id, "invoke"),
                params={"stream": "true"},
                json=_body(input, session_id, history, on_busy=on_busy),
                headers=_key_header(idempotency_key),
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    _raise_for(response)
                parser = _SSEParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield _checked(event)

    async def _follow(self, run_id: str, after: str | None) -> AsyncIterator[StreamEvent]:
        url, failures = _run_url(run_id, "stream"), 0
        while True:
            try:
                async with self._http.stream("GET", url, headers=_stream_headers(after)) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        _raise_for(response)
                    parser = _SSEParser()
                    async for line in response.aiter_lines():
                        got = parser.feed(line)
                        if got is None:
                            continue
                        failures, after = 0, got.id or after
                        yield got
                        if got.last:
                            return
            except httpx.TransportError as exc:
                failures += 1
                if failures > self.retries:
                    raise _unreachable(self.base_url, exc) from exc
                await anyio.sleep(min(0.25 * 2.0**failures, 5.0))
                continue
            return  # the server ended the stream without a last event: nothing more to follow

    async def wait(self, run_id: str, *, timeout: float | None = None) -> dict[str, Any]:  # noqa: ASYNC109 - Client.wait's signature
        """The run's record once it has ended (see ``Client.wait``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.1
        while True:
            record = await self.run(run_id)
            if record["status"] not in ("queued", "executing"):
                return record
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not end within {timeout} s")
            await anyio.sleep(pause)
            pause = min(pause * 1.5, 2.0)

    async def cancel(self, run_id: str) -> RunInfo:
        """Stop a run (it is saved ``interrupted`` and can be resumed); ``wait`` tells when it has."""
        return RunInfo.model_validate(await self._post_once(_run_url(run_id, "cancel"), None, None))

    async def resume_run(self, run_id: str) -> RunInfo:
        """Start a cancelled, failed or stranded run again, as a new background run."""
        return RunInfo.model_validate(await self._post_once(_run_url(run_id, "resume"), None, None))

    async def send_event(
        self, run_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Send an event to a run's session (``Client.send_event``)."""
        body = {"name": name, "payload": payload}
        return dict(await self._post_once(_run_url(run_id, "events"), body, idempotency_key))

    async def resume(self, agent_id: str, session_id: str) -> InvokeResult:
        url = f"{_agent_url(agent_id, 'sessions')}/{_segment(session_id, 'session_id')}/resume"
        with _answered(self.base_url):
            response = await self._http.post(url)
        _raise_for(response)
        return InvokeResult.model_validate(response.json())

    async def agents(self) -> list[dict[str, Any]]:
        return list((await self._get("/api/v1/agents"))["agents"])

    async def sessions(self, agent_id: str) -> list[dict[str, Any]]:
        return list((await self._get(_agent_url(agent_id, "sessions")))["sessions"])

    async def session(self, agent_id: str, session_id: str) -> dict[str, Any]:
        """A session: its whole conversation (``messages``; the model is given
        ``messages[context_start:]``), or a pipeline's run and nodes."""
        return dict(
            await self._get(f"{_agent_url(agent_id, 'sessions')}/{_segment(session_id, 'session_id')}")
        )

    async def delete_session(self, agent_id: str, session_id: str) -> None:
        url = f"{_agent_url(agent_id, 'sessions')}/{_segment(session_id, 'session_id')}"
        with _answered(self.base_url):
            response = await self._http.delete(url)
        _raise_for(response)

    async def runs(
        self,
        agent_id: str | None = None,
        session_id: str | None = None,
        limit: int | None = None,
        **search: Any,
    ) -> list[dict[str, Any]]:
        """Runs, newest first: the first page of ``search_runs``."""
        return list((await self.search_runs(agent_id, session_id, limit=limit, **search))["runs"])

    async def search_runs(
        self,
        agent_id: str | None = None,
        session_id: str | None = None,
        *,
        status: str | list[str] | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        metadata: dict[str, str] | None = None,
        order: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A page of runs that match every filter given: ``{"runs": [...], "next_cursor": ...}`` (pass
        ``next_cursor`` as ``cursor`` for the next page; None after the last)."""
        params = _search(status, since, until, metadata, order, cursor)
        return dict(await self._get("/api/v1/runs", **_filters(agent_id, session_id), limit=limit, **params))

    async def search_sessions(
        self,
        agent_id: str | None = None,
        *,
        status: str | list[str] | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        metadata: dict[str, str] | None = None,
        order: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A page of sessions (each with its latest run's status and metadata) that match every filter:
        ``{"sessions": [...], "next_cursor": ...}``."""
        params = _search(status, since, until, metadata, order, cursor)
        return dict(await self._get("/api/v1/sessions", **_filters(agent_id, None), limit=limit, **params))

    async def schedules(self) -> list[dict[str, Any]]:
        return list((await self._get("/api/v1/schedules"))["schedules"])

    async def schedule(self, schedule_id: str, ticks: int = 20) -> dict[str, Any]:
        """A schedule and its latest ``ticks`` tick records."""
        return dict(await self._get(_schedule_url(schedule_id), ticks=ticks))

    async def create_schedule(
        self, schedule_id: str, agent_id: str, cron: str, **fields: Any
    ) -> dict[str, Any]:
        """Create a schedule (``fields``: timezone, input, session, session_id, missed, ...)."""
        return dict(
            await self._send(
                "POST",
                "/api/v1/schedules",
                None,
                {"id": schedule_id, "agent": agent_id, "cron": cron, **fields},
            )
        )

    async def pause_schedule(self, schedule_id: str) -> dict[str, Any]:
        return dict(await self._send("POST", _schedule_url(schedule_id, "pause"), None, None))

    async def resume_schedule(self, schedule_id: str) -> dict[str, Any]:
        return dict(await self._send("POST", _schedule_url(schedule_id, "resume"), None, None))

    async def run_schedule(self, schedule_id: str) -> RunInfo:
        """Start the schedule's run now (202): the run, to follow like any background run."""
        return RunInfo.model_validate(await self._send("POST", _schedule_url(schedule_id, "run"), None, None))

    async def delete_schedule(self, schedule_id: str) -> None:
        await self._send("DELETE", _schedule_url(schedule_id), None, None)

    async def run(self, run_id: str) -> dict[str, Any]:
        return dict(await self._get(_run_url(run_id)))
