"""The MCP door: ``/mcp`` serves each hosted agent and pipeline of the caller's workspace as an MCP tool
(streamable HTTP, the official ``mcp`` SDK's low-level server, stateless so any worker answers).

A tool takes ``{"input": "...", "session_id": "...", "answers": {interrupt id: answer}}``. Without a
``session_id`` a new session is made (its id is in the result), so a run that stops to ask a human can
be answered: an interrupted run's result is text saying what is asked and how to answer, and its
structured content lists the interrupts. Each event of the run (text, tool calls, nodes) is a progress
notification when the caller asked for progress. One more tool, ``memory_recall``, searches the
caller's memory (``mcp_memory.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import mcp.types as types
from fastapi import FastAPI
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from orchestra._ids import validate_id
from orchestra._json import dumps
from orchestra.hosting import Invocation, Refused, RunService
from orchestra.hosting.config import HostedSpec, ServerConfig
from orchestra.hosting.identity import Identity
from orchestra.server.auth import Authenticator
from orchestra.server.protocols._common import (
    description_of,
    door_caller,
    hosted_in,
    interrupt_text,
    output_text,
    trace_headers,
)
from orchestra.server.protocols.mcp_memory import RECALL_TOOL, recall
from orchestra.session import uuid7

__all__ = ["INPUT_SCHEMA", "mount_mcp"]

_CALLER: contextvars.ContextVar[tuple[str, dict[str, str]]] = contextvars.ContextVar("orchestra_mcp_caller")

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "description": "The task or message, in full."},
        "session_id": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$",
            "description": "Continue this session (a new one is made when absent; the result names it).",
        },
        "answers": {
            "type": "object",
            "additionalProperties": True,
            "description": "Answers to the session's open interrupts: {interrupt id: answer}.",
        },
    },
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "output": {},
        "status": {"type": "string"},
        "session_id": {"type": ["string", "null"]},
        "run_id": {"type": "string"},
        "interrupts": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["status", "run_id"],
}


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class _Door:
    def __init__(self, runtime: RunService, auth: Authenticator, config: ServerConfig) -> None:
        self.runtime = runtime
        self.auth = auth
        self.config = config

    def tools(self, workspace: str) -> list[types.Tool]:
        return [
            types.Tool(
                name=hosted.id,
                description=description_of(self.config, hosted),
                input_schema=INPUT_SCHEMA,
                output_schema=OUTPUT_SCHEMA,
            )
            for hosted in hosted_in(self.config, workspace)
            if hosted.id != RECALL_TOOL.name
        ] + [RECALL_TOOL]

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        workspace, _ = _CALLER.get()
        return types.ListToolsResult(tools=self.tools(workspace))

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        workspace, headers = _CALLER.get()
        if params.name == RECALL_TOOL.name:
            return await recall(self.runtime, workspace, dict(params.arguments or {}))
        hosted = next((h for h in hosted_in(self.config, workspace) if h.id == params.name), None)
        if hosted is None:
            return _error(f"no agent {params.name!r} in this workspace; tools/list names them")
        try:
            invocation = self._invocation(hosted, dict(params.arguments or {}))
        except ValueError as exc:
            return _error(str(exc))
        invocation.trace_headers = trace_headers(headers)
        try:
            await self.runtime.admit(workspace, invocation)
        except Refused as exc:  # another user's session: as unknown
            return _error(exc.message)
        done = 0
        last: tuple[str, Any] = ("error", None)
        # Read to the end: the stream holds the session's turn (and its span) until it is exhausted.
        stream = cast(AsyncGenerator[tuple[str, Any], None], self.runtime.stream(workspace, invocation))
        async with contextlib.aclosing(stream) as events:
            async for name, data in events:
                if name in ("result", "error"):
                    last = (name, data)
                    continue
                done += 1
                with contextlib.suppress(Exception):  # progress is best effort: the run goes on without it
                    await ctx.session.report_progress(done, None, _progress_text(name, data))
        await self.runtime.flush_records(workspace)
        return _answer(hosted, *last)

    def _invocation(self, hosted: HostedSpec, arguments: dict[str, Any]) -> Invocation:
        unknown = set(arguments) - {"input", "session_id", "answers"}
        if unknown:
            raise ValueError(f"unknown arguments {sorted(unknown)}: give input, session_id, answers")
        answers = arguments.get("answers")
        task = arguments.get("input")
        if answers is not None and not (isinstance(answers, dict) and answers):
            raise ValueError("answers is an object {interrupt id: answer}")
        if answers is None and not (isinstance(task, str) and task.strip()):
            raise ValueError("input is required: the task or message, as a non-empty string")
        if isinstance(task, str) and len(task) > self.config.limits.max_input_chars:
            raise ValueError(f"input is over {self.config.limits.max_input_chars} characters")
        session_id = arguments.get("session_id") or str(uuid7())
        validate_id(session_id, "session_id")
        text = task if isinstance(task, str) else json.dumps(answers, sort_keys=True)
        invocation = Invocation(hosted, text, session_id, None, on_busy=self.config.on_busy(hosted))
        invocation.answers = answers
        return invocation


def _progress_text(name: str, data: Any) -> str:
    if isinstance(data, dict):
        node = data.get("node_id")
        what = data.get("name") or data.get("status") or ""
        return " ".join(str(part) for part in (name, node, what) if part)
    return name


def _answer(hosted: HostedSpec, name: str, data: Any) -> types.CallToolResult:
    record, failure = (data, None) if name == "result" else data
    structured = {
        "output": record.output,
        "status": record.status,
        "session_id": record.session_id,
        "run_id": record.run_id,
        "interrupts": record.interrupts,
    }
    structured = json.loads(dumps(structured, lenient=True))
    if failure is not None:
        text = f"{hosted.id} failed ({failure.code}): {failure.message}"
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=structured, is_error=True
        )
    if record.status == "interrupted":
        example = json.dumps({i["id"]: "<your answer>" for i in record.interrupts})
        text = (
            f"{hosted.id} is waiting for an answer before it can go on:\n{interrupt_text(record.interrupts)}\n"
            f'Answer by calling {hosted.id} again with session_id "{record.session_id}" and answers {example}.'
        )
    else:
        text = output_text(record.output) or "(no output)"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


class _Authenticated:
    """Refuse a request without a valid key (401, before the MCP SDK sees it); otherwise run the MCP app
    with the caller's workspace in a context variable its handlers read."""

    def __init__(self, manager: StreamableHTTPSessionManager, auth: Authenticator) -> None:
        self.manager = manager
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        found = await door_caller(self.auth, headers)
        if not isinstance(found, Identity):
            body = json.dumps({"error": {"code": found.code, "message": f"MCP: {found.message}"}}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": found.status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b"Bearer"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        token = _CALLER.set((found.workspace, headers))
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            _CALLER.reset(token)


def mount_mcp(app: FastAPI, runtime: RunService, auth: Authenticator, config: ServerConfig) -> None:
    """Serve ``/mcp`` (see the module docstring); the SDK's session manager runs with the app."""
    door = _Door(runtime, auth, config)
    server: Server[Any] = Server("orchestra", on_list_tools=door.list_tools, on_call_tool=door.call_tool)
    manager = StreamableHTTPSessionManager(app=server, stateless=True)
    endpoint = _Authenticated(manager, auth)
    app.add_route("/mcp", endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)  # type: ignore[arg-type]
    previous = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(inner: Any) -> AsyncIterator[Any]:
        async with manager.run(), previous(inner) as state:
            yield state

    app.router.lifespan_context = lifespan
