"""Tools from Model Context Protocol servers, with the official ``mcp`` SDK (the ``[mcp]`` extra).

``MCPClient.stdio(command, args)`` starts a server as a subprocess; ``MCPClient.http(url)`` connects to
a streamable-HTTP server. ``Agent(tools=[client])`` exposes the server's tools (optionally filtered with
``include``/``exclude`` and renamed with ``prefix``).

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
        raise ConfigurationError("MCP tools need the official SDK: pip install 'orchestra[mcp]'") from None
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
    ) -> None:
        self._transport = transport  # () -> async context manager yielding (read, write, ...)
        self.description = description
        self.prefix = prefix
        self.include = set(include) if include is not None else None
        self.exclude = set(exclude or ())
        self.timeout = timeout  # each tool call
        self.connect_timeout = connect_timeout  # starting the server, initializing, listing its tools
        self._portal_cm: Any = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._session: Any = None
        self._stop: anyio.Event | None = None  # set to end the connection (on the portal's loop)
        self._ready: anyio.Event | None = None  # set once connected, or once connecting failed
        self._failure: BaseException | None = None
        self._tools: list[MCPTool] = []
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
        return cls(lambda: stdio_client(params), f"stdio:{command}", **options)

    @classmethod
    def http(cls, url: str, headers: Mapping[str, str] | None = None, **options: Any) -> MCPClient:
        """A server at ``url`` speaking MCP's streamable HTTP transport."""
        _sdk()
        from mcp.client.streamable_http import streamable_http_client

        timeout = float(options.get("connect_timeout", DEFAULT_TIMEOUT))

        @contextlib.asynccontextmanager
        async def transport() -> Any:
            import httpx2

            # The SDK's own HTTP client (httpx2); every read is bounded, so a dead server cannot hang a call.
            async with (
                httpx2.AsyncClient(
                    headers=dict(headers or {}), timeout=httpx2.Timeout(timeout), follow_redirects=True
                ) as client,
                streamable_http_client(url, http_client=client) as streams,
            ):
                yield streams

        return cls(transport, f"http:{url}", **options)

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
            ready: Any = self._portal.start_task_soon(self._serve)
            try:
                self._portal.call(self._wait_ready)
            except BaseException as exc:
                ready.cancel()
                self._shutdown_portal()
                raise ConnectionError(
                    f"MCP server {self.description}: could not connect: {_reason(exc)}"
                ) from None
        return self

    async def _serve(self) -> None:
        """Owns the transport and the session for their whole life (they are task-bound)."""
        mcp = _sdk()
        self._stop = anyio.Event()
        try:
            async with self._transport() as streams, mcp.ClientSession(streams[0], streams[1]) as session:
                with anyio.fail_after(self.connect_timeout):
                    await session.initialize()
                    listed = await session.list_tools()
                self._tools = [
                    MCPTool(self, tool.name, tool.description or "", tool.input_schema)
                    for tool in listed.tools
                    if (self.include is None or tool.name in self.include) and tool.name not in self.exclude
                ]
                self._session = session
                assert self._ready is not None
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._failure = exc
            raise
        finally:
            if self._ready is not None:
                self._ready.set()

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

    def agent_tools(self) -> list[MCPTool]:
        """The server's tools as agent tools (starts the client if needed, and closes it at exit)."""
        if not self.started:
            self.start()
            atexit.register(self.close)
        return list(self._tools)

    async def call(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> Any:
        """Call a tool on the server (``meta`` goes in the request's ``_meta``); raises on a dead server or
        after ``timeout`` seconds."""
        portal = self._portal
        if portal is None or self._session is None:
            raise ConnectionError(
                f"MCP server {self.description} is not connected (closed, or never started)"
            )
        session = self._session

        async def call() -> Any:
            with anyio.fail_after(self.timeout):
                return await session.call_tool(
                    name,
                    arguments,
                    read_timeout_seconds=self.timeout,
                    meta=meta,
                )

        return await anyio.to_thread.run_sync(portal.call, call)


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
            result = await self.client.call(self.remote_name, dict(tool_use.get("input") or {}), meta)
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


def _content(result: Any) -> list[dict[str, Any]]:
    """MCP content as our tool result blocks: text, images and structured content."""
    blocks: list[dict[str, Any]] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", None)
        if kind == "text":
            blocks.append({"text": item.text if item.text.strip() else "(empty)"})
        elif kind == "image":
            image_format = (item.mime_type or "image/png").split("/")[-1].replace("jpg", "jpeg")
            blocks.append(
                {"image": {"format": image_format, "source": {"bytes": base64.b64decode(item.data)}}}
            )
        else:
            blocks.append({"text": f"[{kind} content]"})
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        blocks.append({"json": structured})
    return blocks or [{"text": "(no output)"}]
