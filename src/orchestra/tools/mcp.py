"""Tools from Model Context Protocol servers, with the official ``mcp`` SDK (the ``[mcp]`` extra).

``MCPClient.stdio(command, args)`` starts a server as a subprocess; ``MCPClient.http(url)`` connects to
a streamable-HTTP server. ``Agent(tools=[client])`` exposes the server's tools (optionally filtered with
``include``/``exclude`` and renamed with ``prefix``): every page of a paged listing, and again after the
server says its list changed (``notifications/tools/list_changed``: the new list is in place before the
next model call). Every content kind of a result reaches the model: text, images, embedded resources (text
as text, images as images, other blobs as a placeholder naming them), resource links and audio as named
placeholders. With ``resources=True`` a ``read_resource`` tool reads the server's resources; prompts are
templates (``list_prompts``, ``get_prompt``).

The connection lives on an event loop of its own, in a worker thread (an anyio blocking portal): the
SDK's transports are task-bound context managers, and an agent's invocations may run on any loop or
task. Every call is bounded by ``timeout``: a server that dies, hangs or never answers gives the model
an error tool result and the log one line (``mcp_call_failed``), never a hang. The client is closed by
``async with`` / ``close()``, or, when an agent started it, at interpreter exit.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

from orchestra._dist import install_hint
from orchestra._logging import get_logger
from orchestra.errors import ConfigurationError
from orchestra.models import ToolSpec
from orchestra.tools._tool import ToolContext, ToolResultDict, tool_result

__all__ = ["MCPClient", "MCPTool"]

_log = get_logger("orchestra.mcp")

IDEMPOTENCY_META_KEY = "orchestra/idempotency-key"
"""The ``_meta`` key of a ``tools/call`` request that carries the call's idempotency key (the same on every
execution of one model tool call; see ``orchestra.tools.effects``)."""
DEFAULT_TIMEOUT = 30.0


def _sdk() -> Any:
    try:
        import mcp
    except ImportError:
        raise ConfigurationError("MCP tools need the official SDK: " + install_hint("mcp")) from None
    return mcp


class MCPClient:
    """A connection to one MCP server whose tools an agent can call (see the module docstring)."""

    def __init__(
        self,
        transport: Any,
        description: str,
        *,
        prefix: str | None = None,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_TIMEOUT,
        resources: bool = False,
        max_pages: int = 100,
    ) -> None:
        self._transport = transport  # () -> async context manager yielding (read, write, ...)
        self.description = description
        self.prefix = prefix
        self.include = set(include) if include is not None else None
        self.exclude = set(exclude or ())
        self.resources = resources  # add a read_resource tool
        self.max_pages = max_pages  # a server whose cursors never end is cut here (and logged)
        self.tools_version = 0  # bumped when the tool list changed (the agent's registry follows it)
        self._stale = False  # the server said its tool list changed; not listed again yet
        self._refusal: str | None = None  # why an HTTP server refused us (401/403), for the error
        self._list_lock: anyio.Lock | None = None  # made on the connection's loop
        self._refreshing = 0  # refreshes in flight
        self._resource_list: list[Any] = []
        self.timeout = timeout  # each tool call
        self.connect_timeout = connect_timeout  # starting the server, initializing, listing its tools
        self._portal_cm: Any = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._session: Any = None
        self._stop: anyio.Event | None = None  # set to end the connection (on the portal's loop)
        self._ready: anyio.Event | None = None  # set once connected, or once connecting failed
        self._failure: BaseException | None = None
        self._tools: list[MCPTool | ReadResourceTool] = []
        self._lock = threading.Lock()

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        **options: Any,
    ) -> MCPClient:
        """A server started as ``command args...`` speaking MCP over its stdin and stdout."""
        mcp = _sdk()
        from mcp.client.stdio import stdio_client

        params = mcp.StdioServerParameters(command=command, args=list(args), env=dict(env) if env else None)
        client = cls(lambda: stdio_client(params), f"stdio:{command}", **options)
        client._command = command
        return client

    @classmethod
    def http(cls, url: str, headers: Mapping[str, str] | None = None, **options: Any) -> MCPClient:
        """A server at ``url`` speaking MCP's streamable HTTP transport."""
        _sdk()
        from mcp.client.streamable_http import streamable_http_client

        timeout = float(options.get("connect_timeout", DEFAULT_TIMEOUT))
        client: MCPClient

        async def note_refusal(response: Any) -> None:
            # The SDK reports any HTTP error as "Server returned an error response"; keep the status.
            if response.status_code in (401, 403):
                client._refusal = f"HTTP {response.status_code} from {url}"

        @contextlib.asynccontextmanager
        async def transport() -> Any:
            import httpx2

            # The SDK's own HTTP client (httpx2); every read is bounded, so a dead server cannot hang a call.
            async with (
                httpx2.AsyncClient(
                    headers=dict(headers or {}),
                    timeout=httpx2.Timeout(timeout),
                    follow_redirects=True,
                    event_hooks={"response": [note_refusal]},
                ) as http_client,
                streamable_http_client(url, http_client=http_client) as streams,
            ):
                yield streams

        client = cls(transport, f"http:{url}", **options)
        return client

    def __repr__(self) -> str:
        return f"MCPClient({self.description!r})"

    # -- lifetime ---------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._session is not None

    def start(self) -> MCPClient:
        """Connect, initialize and list the tools (blocking; does nothing if already started).

        Raises:
            ConnectionError: the server could not be started or reached within ``timeout`` (named).
        """
        with self._lock:
            if self._session is not None:
                return self
            self._portal_cm = anyio.from_thread.start_blocking_portal()
            self._portal = self._portal_cm.__enter__()
            self._ready = self._portal.call(anyio.Event)
            self._failure = None
            self._refusal = None
            ready: Any = self._portal.start_task_soon(self._serve)
            try:
                self._portal.call(self._wait_ready)
            except BaseException as exc:
                ready.cancel()
                self._shutdown_portal()
                raise ConnectionError(
                    f"MCP server {self.description}: could not connect: {self._connect_reason(exc)}"
                ) from None
        return self

    _command: str | None = None

    def _connect_reason(self, exc: BaseException) -> str:
        """Why connecting failed, with what to do for the causes a user can fix."""
        if self._refusal is not None:
            return (
                f"{self._refusal}: the server wants credentials; pass them with "
                "MCPClient.http(url, headers={'Authorization': 'Bearer ...'}) (or {headers: ...} in YAML)"
            )
        if _leaf(exc, FileNotFoundError) is not None and self._command is not None:
            return f"command {self._command!r} not found: check the path, or install the server"
        return _reason(exc)

    async def _serve(self) -> None:
        """Owns the transport and the session for their whole life (they are task-bound)."""
        mcp = _sdk()
        self._stop = anyio.Event()
        try:
            async with (
                self._transport() as streams,
                anyio.create_task_group() as background,
                mcp.ClientSession(
                    _Watched(streams[0], self), streams[1], message_handler=self._on_message(background)
                ) as session,
            ):
                with anyio.fail_after(self.connect_timeout):
                    await session.initialize()
                    await self._list(session)
                self._session = session
                assert self._ready is not None
                self._ready.set()
                await self._stop.wait()
                background.cancel_scope.cancel()
        except BaseException as exc:
            self._failure = exc
            raise
        finally:
            if self._ready is not None:
                self._ready.set()

    async def _list(self, session: Any) -> None:
        """List every page of the tools (and of the resources, if asked) and install them."""
        tools = await self._every_page(session.list_tools, "tools")
        self._tools = [
            MCPTool(self, tool.name, tool.description or "", tool.input_schema)
            for tool in tools
            if (self.include is None or tool.name in self.include) and tool.name not in self.exclude
        ]
        if self.resources:
            self._resource_list = await self._every_page(session.list_resources, "resources")
            self._tools.append(ReadResourceTool(self))
        self.tools_version += 1

    async def _every_page(self, list_page: Any, field: str) -> list[Any]:
        from mcp.types import PaginatedRequestParams

        items: list[Any] = []
        cursor: str | None = None
        for _ in range(self.max_pages):
            page = await list_page(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            items.extend(getattr(page, field))
            cursor = page.next_cursor
            if not cursor:
                return items
        _log.warning("mcp_listing_cut", server=self.description, listing=field, pages=self.max_pages)
        return items

    def _on_message(self, background: Any) -> Any:
        async def handle(message: Any) -> None:
            if getattr(message, "method", None) == "notifications/tools/list_changed":
                background.start_soon(self._refresh)

        return handle

    async def _refresh(self) -> None:
        """List the tools again (on the connection's loop), unless a refresh already did; one at a time,
        so a caller waiting here gets the list that the refresh in flight is fetching."""
        self._refreshing += 1
        try:
            if self._list_lock is None:
                self._list_lock = anyio.Lock()
            async with self._list_lock:
                if self._session is None or not self._stale:
                    return
                self._stale = False
                try:
                    with anyio.fail_after(self.connect_timeout):
                        await self._list(self._session)
                except BaseException:
                    self._stale = True
                    raise
        finally:
            self._refreshing -= 1

    async def refresh_if_changed(self) -> None:
        """If the server said its tools changed, have the new list in place when this returns."""
        if (self._stale or self._refreshing) and self._portal is not None:
            await anyio.to_thread.run_sync(self._portal.call, self._refresh)

    async def _wait_ready(self) -> None:
        assert self._ready is not None
        with anyio.fail_after(self.connect_timeout + 5):
            await self._ready.wait()
        if self._session is None:
            raise self._failure or ConnectionError("the connection ended")

    def close(self) -> None:
        """Close the session and stop the server (a stdio server's process ends with it)."""
        with self._lock:
            if self._portal is None:
                return
            if self._stop is not None:
                with contextlib.suppress(Exception):
                    self._portal.call(self._stop.set)
            self._shutdown_portal()

    def _shutdown_portal(self) -> None:
        cm, self._portal_cm, self._portal, self._session = self._portal_cm, None, None, None
        if cm is not None:
            with contextlib.suppress(Exception):
                cm.__exit__(None, None, None)

    async def __aenter__(self) -> MCPClient:
        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await anyio.to_thread.run_sync(self.close)

    # -- tools ------------------------------------------------------------------------------------------

    def agent_tools(self) -> list[MCPTool | ReadResourceTool]:
        """The server's tools as agent tools (starts the client if needed, and closes it at exit)."""
        if not self.started:
            self.start()
            atexit.register(self.close)
        return list(self._tools)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None = None,
        progress: Any = None,
    ) -> Any:
        """Call a tool on the server (``meta`` goes in the request's ``_meta``); raises on a dead server or
        after ``timeout`` seconds.

        ``progress(progress, total, message)``, if given, is called (from the connection's thread) for
        each progress notification of the call.
        """

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress(done, total, message)

        return await self._on_connection(
            lambda session: session.call_tool(
                name,
                arguments,
                read_timeout_seconds=self.timeout,
                meta=meta,
                progress_callback=on_progress if progress is not None else None,
            )
        )

    def _connected(self) -> tuple[anyio.from_thread.BlockingPortal, Any]:
        if self._portal is None or self._session is None:
            raise ConnectionError(
                f"MCP server {self.description} is not connected (closed, or never started)"
            )
        return self._portal, self._session

    async def _on_connection(self, request: Any) -> Any:
        """Run ``request(session)`` on the connection's loop, bounded by ``timeout``."""
        portal, session = self._connected()

        async def run() -> Any:
            with anyio.fail_after(self.timeout):
                return await request(session)

        return await anyio.to_thread.run_sync(portal.call, run)

    # -- resources and prompts --------------------------------------------------------------------------

    @property
    def resource_list(self) -> list[Any]:
        """The server's resources (listed at start when ``resources=True``)."""
        return list(self._resource_list)

    async def read_resource(self, uri: str) -> list[dict[str, Any]]:
        """A resource's contents as content blocks (text as text, images as images)."""
        result = await self._on_connection(lambda session: session.read_resource(uri))
        blocks: list[dict[str, Any]] = []
        for item in result.contents:
            blocks.extend(_resource_blocks(item, embedded=False))
        return blocks or [{"text": "(empty)"}]

    async def list_prompts(self) -> list[Any]:
        """The server's prompts (``name``, ``description``, ``arguments``), every page."""
        prompts: list[Any] = await self._on_connection(
            lambda session: self._every_page(session.list_prompts, "prompts")
        )
        return prompts

    async def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> str:
        """A prompt template filled in with ``arguments``: its messages' text, one per line."""
        result = await self._on_connection(lambda session: session.get_prompt(name, dict(arguments or {})))
        lines = []
        for message in result.messages:
            for block in _content_items([message.content]):
                if "text" in block:
                    lines.append(block["text"])
        return "\n".join(lines)


class _Watched:
    """The session's read stream, watched in arrival order: a ``tools/list_changed`` marks the tools stale
    before any later answer is read, so a call whose server changed its tools meanwhile sees it."""

    def __init__(self, stream: Any, client: MCPClient) -> None:
        self._stream = stream
        self._client = client

    def _see(self, item: Any) -> Any:
        message = getattr(getattr(item, "message", None), "method", None)
        if message == "notifications/tools/list_changed":
            self._client._stale = True
        return item

    async def receive(self) -> Any:
        return self._see(await self._stream.receive())

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        return self._see(await self._stream.__anext__())

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:  # last_context and other extras of the SDK's streams
        return getattr(self._stream, name)


def _leaf(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of type ``kind`` in ``exc``, its groups or its causes."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _leaf(inner, kind)
            if found is not None:
                return found
    cause = exc.__cause__ or exc.__context__
    return _leaf(cause, kind) if cause is not None and cause is not exc else None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if isinstance(e, Exception)]  # cancellations aside
        if leaves:
            return _reason(leaves[0])
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class MCPTool:
    """One tool of an MCP server, as an agent tool."""

    def __init__(self, client: MCPClient, remote_name: str, description: str, schema: dict[str, Any]) -> None:
        self.client = client
        self.remote_name = remote_name
        self._name = f"{client.prefix}{remote_name}" if client.prefix else remote_name
        schema = dict(schema or {"type": "object", "properties": {}})
        schema.pop("title", None)
        self._spec: ToolSpec = {
            "name": self._name,
            "description": description or f"The {remote_name} tool of {client.description}.",
            "inputSchema": {"json": schema},
        }

    @property
    def name(self) -> str:
        return self._name

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def __repr__(self) -> str:
        return f"MCPTool({self._name!r} of {self.client.description!r})"

    async def invoke(self, tool_use: dict[str, Any], context: ToolContext) -> ToolResultDict:
        tool_use_id = tool_use["toolUseId"]
        # The call's idempotency key travels in the request's _meta, where MCP allows such metadata.
        meta = {IDEMPOTENCY_META_KEY: context.idempotency_key} if context.idempotency_key else None
        try:
            result = await self.client.call(
                self.remote_name,
                dict(tool_use.get("input") or {}),
                meta,
                progress=context.progress_reporter(),
            )
            # The server may have changed its tools during the call: the next model call sees the new list.
            await self.client.refresh_if_changed()
        except Exception as exc:
            reason = _reason(exc)
            _log.warning(
                "mcp_call_failed", server=self.client.description, tool=self.remote_name, reason=reason
            )
            return tool_result(
                tool_use_id, f"Error: the MCP server {self.client.description} failed: {reason}", "error"
            )
        content = _content(result)
        status = "error" if getattr(result, "is_error", False) else "success"
        return {"toolUseId": tool_use_id, "status": status, "content": content}


class ReadResourceTool:
    """``read_resource(uri)``: reads one of the server's resources (``MCPClient(resources=True)``); its
    description lists them, so the model knows what it may read."""

    def __init__(self, client: MCPClient) -> None:
        self.client = client
        self._name = f"{client.prefix or ''}read_resource"
        listed = "; ".join(
            f"{r.uri} ({r.name}{': ' + r.description if r.description else ''})"
            for r in client._resource_list[:50]
        )
        self._spec: ToolSpec = {
            "name": self._name,
            "description": f"Read a resource of {client.description} by its URI (from a resource link, or "
            f"one of: {listed or 'none listed'}).",
            "inputSchema": {
                "json": {
                    "type": "object",
                    "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
                    "required": ["uri"],
                }
            },
        }

    @property
    def name(self) -> str:
        return self._name

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def invoke(self, tool_use: dict[str, Any], context: ToolContext) -> ToolResultDict:
        tool_use_id = tool_use["toolUseId"]
        uri = (tool_use.get("input") or {}).get("uri")
        if not isinstance(uri, str) or not uri:
            return tool_result(tool_use_id, "Error: read_resource needs a 'uri' string", "error")
        try:
            content = await self.client.read_resource(uri)
        except Exception as exc:
            return tool_result(
                tool_use_id, f"Error: {self.client.description} could not read {uri}: {_reason(exc)}", "error"
            )
        return {"toolUseId": tool_use_id, "status": "success", "content": content}


def _content(result: Any) -> list[dict[str, Any]]:
    """MCP content as our tool result blocks, every kind mapped (see the module docstring)."""
    blocks = _content_items(getattr(result, "content", None) or [])
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        blocks.append({"json": structured})
    return blocks or [{"text": "(no output)"}]


def _content_items(items: Iterable[Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for item in items:
        kind = getattr(item, "type", None)
        if kind == "text":
            blocks.append({"text": item.text if item.text.strip() else "(empty)"})
        elif kind == "image":
            blocks.append(_image(item.mime_type, base64.b64decode(item.data)))
        elif kind == "audio":
            blocks.append({"text": _placeholder("audio", item.mime_type, len(base64.b64decode(item.data)))})
        elif kind == "resource":
            blocks.extend(_resource_blocks(item.resource, embedded=True))
        elif kind == "resource_link":
            details = ", ".join(part for part in (item.mime_type, item.description) if part)
            blocks.append(
                {
                    "text": f"[resource link: {item.name} at {item.uri}{' (' + details + ')' if details else ''}]"
                }
            )
        else:
            blocks.append({"text": f"[{kind} content, not shown]"})
    return blocks


def _resource_blocks(resource: Any, *, embedded: bool) -> list[dict[str, Any]]:
    """A resource's contents: text (headed by its URI when embedded in a result), images, or a placeholder."""
    mime = getattr(resource, "mime_type", None)
    text = getattr(resource, "text", None)
    if text is not None:
        return [{"text": f"[resource {resource.uri}]\n{text}" if embedded else text or "(empty)"}]
    data = base64.b64decode(resource.blob)
    if mime in _IMAGE_TYPES:
        return [_image(mime, data)]
    return [{"text": _placeholder(f"resource {resource.uri}", mime, len(data))}]


_IMAGE_TYPES = {"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"}


def _image(mime: str | None, data: bytes) -> dict[str, Any]:
    image_format = (mime or "image/png").split("/")[-1].replace("jpg", "jpeg")
    return {"image": {"format": image_format, "source": {"bytes": data}}}


def _placeholder(what: str, mime: str | None, size: int) -> str:
    return f"[{what}: {mime or 'unknown type'}, {size} bytes, not shown]"
