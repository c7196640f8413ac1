"""The A2A door: each hosted agent and pipeline is an A2A agent, with the official ``a2a-sdk``.

- ``GET /a2a/{agent}/.well-known/agent-card.json``: its agent card (JSON-RPC at ``/a2a/{agent}/``,
  streaming, bearer keys);
- ``POST /a2a/{agent}/``: JSON-RPC, A2A 1.0 (``SendMessage``, ``SendStreamingMessage``, ``GetTask``,
  ``CancelTask``, ...) and 0.3 (``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``).

An A2A context is an orchestra session (the context id is the session id), so a conversation goes on
from message to message. A run that stops to ask a human puts its task in ``input-required``, with the
questions in the status message (text, and a data part ``{"interrupts": [...]}``); the next message of
that task answers them (a data part ``{"answers": {interrupt id: answer}}``, or text that answers every
open question). Tasks are kept in the workspace's storage, so any server process can fetch or cancel them.
A message's ``traceparent`` header continues the caller's trace.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from a2a.helpers import get_data_parts, new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.tasks import TaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    ListTasksRequest,
    ListTasksResponse,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from fastapi import FastAPI
from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Router
from starlette.types import Receive, Scope, Send

from orchestra._ids import validate_id
from orchestra.hosting import Invocation, Refused, RunService
from orchestra.hosting.config import HostedSpec, ServerConfig
from orchestra.hosting.identity import Identity, caller, may_call, owner, visible
from orchestra.server.auth import Authenticator
from orchestra.server.protocols._common import (
    description_of,
    door_caller,
    interrupt_text,
    output_text,
    trace_headers,
)

__all__ = ["agent_card", "mount_a2a"]

CARD_PATH = "/.well-known/agent-card.json"


def agent_card(config: ServerConfig, hosted: HostedSpec, base_url: str) -> AgentCard:
    """The agent card of one hosted agent or pipeline, served under ``base_url``."""
    spec = config.spec_of(hosted.id).spec
    description = description_of(config, hosted)
    return AgentCard(
        name=hosted.id,
        description=description,
        version="1",
        supported_interfaces=[
            AgentInterface(
                url=f"{base_url.rstrip('/')}/a2a/{hosted.id}/",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id=hosted.id, name=hosted.id, description=description, tags=[spec.kind])],
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="An API key of the agent's workspace."
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
    )


def session_of(context_id: str) -> str:
    """The session id an A2A context id stands for (a context id that is not a valid id is hashed)."""
    try:
        return validate_id(context_id, "context_id")
    except ValueError:
        return "a2a-" + hashlib.sha256(context_id.encode()).hexdigest()[:32]


class StorageTaskStore(TaskStore):
    """A2A tasks as JSON in the workspace's storage, under ``a2a/<agent>/tasks/<task id>.json``."""

    def __init__(self, runtime: RunService, agent_id: str) -> None:
        self.runtime = runtime
        self.agent_id = agent_id
        # A streamed reply is one WORKING update per text delta: only a change of state is written (each
        # write is durable), so a long reply costs two or three writes, not one per delta.
        self._written: dict[str, int] = {}

    def _key(self, task_id: str, context: ServerCallContext) -> tuple[Any, str] | None:
        try:
            validate_id(task_id, "task_id")
        except ValueError:
            return None
        storage = self.runtime.storage(context.state["workspace"])
        return storage, f"a2a/{self.agent_id}/tasks/{task_id}.json"

    async def save(self, task: Task, context: ServerCallContext) -> None:
        where = self._key(task.id, context)
        if where is None:
            return
        state = task.status.state
        if state == TaskState.TASK_STATE_WORKING and self._written.get(task.id) == state:
            return
        stored = json.loads(json_format.MessageToJson(task))
        stored[_OWNER] = owner()  # who made it: another user's task is not found (hosting/identity.py)
        await where[0].write(where[1], json.dumps(stored).encode())
        if state in _FINAL:
            self._written.pop(task.id, None)
        else:
            self._written[task.id] = state

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        where = self._key(task_id, context)
        found = await where[0].read(where[1]) if where is not None else None
        return None if found is None else _visible_task(found[0])

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        storage = self.runtime.storage(context.state["workspace"])
        tasks = []
        for key in await storage.list(f"a2a/{self.agent_id}/tasks/"):
            found = await storage.read(key)
            task = None if found is None else _visible_task(found[0])
            if task is None:
                continue
            if params.context_id and task.context_id != params.context_id:
                continue
            if params.status and task.status.state != params.status:
                continue
            tasks.append(task)
        limit = params.page_size or 50
        return ListTasksResponse(tasks=tasks[:limit], total_size=len(tasks), page_size=limit)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        where = self._key(task_id, context)
        if where is not None and await self.get(task_id, context) is not None:
            await where[0].delete(where[1])


_OWNER = "orchestraOwner"  # beside the task's own fields in the stored JSON; never sent


def _visible_task(data: bytes) -> Task | None:
    """A stored task, if the caller may see it (a task stored before owners were recorded has none)."""
    stored = json.loads(data)
    if not visible(stored.pop(_OWNER, None)):
        return None
    return json_format.Parse(json.dumps(stored), Task(), ignore_unknown_fields=True)


_FINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


class RuntimeExecutor(AgentExecutor):
    """Runs a hosted agent or pipeline for A2A: ``RunService.stream``'s events as A2A task updates."""

    def __init__(self, runtime: RunService, hosted: HostedSpec) -> None:
        self.runtime = runtime
        self.hosted = hosted

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        workspace = context.call_context.state["workspace"]
        assert context.task_id is not None
        assert context.context_id is not None
        assert context.message is not None
        task = context.current_task
        if task is None:
            task = Task(
                id=context.task_id,
                context_id=context.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message],
            )
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()
        answers = _answers(task, context.message.parts, text)
        invocation = Invocation(
            self.hosted,
            text or "(answers)",
            session_of(task.context_id),
            None,
            on_busy=self.runtime.config.on_busy(self.hosted),
        )
        invocation.answers = answers
        invocation.trace_headers = trace_headers(context.call_context.state.get("headers") or {})
        try:
            await self.runtime.admit(workspace, invocation)
        except Refused as exc:  # another user's context: as unknown, nothing of it shown
            await updater.failed(updater.new_agent_message([new_text_part(exc.message)]))
            return
        await updater.start_work()
        last: tuple[str, Any] = ("error", None)
        async for name, data in self.runtime.stream(workspace, invocation):
            if name in ("result", "error"):
                last = (name, data)
            elif name == "text":
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING, updater.new_agent_message([new_text_part(data["text"])])
                )
        await self.runtime.flush_records(workspace)
        await _conclude(updater, *last)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # The SDK has cancelled execute() (the run rolls its turn back); say so.
        assert context.task_id is not None
        assert context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def _answers(task: Task, parts: Any, text: str) -> dict[str, Any] | None:
    """The answers a message gives to the task's open interrupts (None: the task asks nothing)."""
    if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        return None
    asked: list[dict[str, Any]] = []
    for data in get_data_parts(list(task.status.message.parts)):
        if isinstance(data, dict):
            asked.extend(data.get("interrupts") or [])
    for data in get_data_parts(list(parts)):
        if isinstance(data, dict) and isinstance(data.get("answers"), dict):
            return dict(data["answers"])
    return {interrupt["id"]: text for interrupt in asked} or None


async def _conclude(updater: TaskUpdater, name: str, data: Any) -> None:
    if name == "error":
        record, failure = data if data is not None else (None, None)
        message = failure.message if failure is not None else "the run ended without an answer"
        await updater.failed(updater.new_agent_message([new_text_part(message)]))
        return
    record = data
    if record.status == "interrupted":
        parts = [
            new_text_part(interrupt_text(record.interrupts)),
            new_data_part({"interrupts": record.interrupts}),
        ]
        await updater.requires_input(updater.new_agent_message(parts))
        return
    output = record.output
    part: Part = (
        new_data_part(output) if isinstance(output, dict | list) else new_text_part(output_text(output))
    )
    await updater.add_artifact([part], name="output", last_chunk=True)
    await updater.complete()


class _ContextBuilder(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        found = caller()  # the door checked it (``_Door``) and made it the request's caller
        context.state["workspace"] = None if found is None else found.workspace
        return context


class _Door:
    """``/a2a``: a key check (401, or 404 for another workspace's agent), then the agent's own routes."""

    def __init__(self, runtime: RunService, auth: Authenticator, config: ServerConfig) -> None:
        self.auth = auth
        self.config = config
        self.apps: dict[str, Router] = {}
        builder = _ContextBuilder()
        for hosted in config.agents:
            card = agent_card(config, hosted, "http://localhost")
            handler = DefaultRequestHandler(
                agent_executor=RuntimeExecutor(runtime, hosted),
                task_store=StorageTaskStore(runtime, hosted.id),
                agent_card=card,
            )
            routes = create_jsonrpc_routes(
                handler, rpc_url="/", context_builder=builder, enable_v0_3_compat=True
            )
            self.apps[hosted.id] = Router(routes=routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        root, path = scope.get("root_path", ""), scope["path"]
        below = path[len(root) :] if root and path.startswith(root) else path  # the path below /a2a
        agent_id, _, rest = below.lstrip("/").partition("/")
        found = await door_caller(self.auth, request.headers)
        hosted = next((h for h in self.config.agents if h.id == agent_id), None)
        response: Response | None = None
        if not isinstance(found, Identity):
            response = _refusal(found.status, found.code, f"A2A: {found.message}")
            if found.status == 401:
                response.headers["WWW-Authenticate"] = "Bearer"
        elif hosted is None or hosted.workspace != found.workspace or not may_call(hosted):
            response = _refusal(404, "unknown_agent", f"no agent {agent_id!r} in this workspace")
        elif "/" + rest == CARD_PATH:
            base = str(request.base_url).rstrip("/")
            response = JSONResponse(agent_card_to_dict(agent_card(self.config, hosted, base)))
        if response is not None:
            await response(scope, receive, send)
            return
        inner = dict(scope)
        inner["root_path"] = f"{scope.get('root_path', '')}/{agent_id}"
        if not rest:  # /a2a/{agent} is the JSON-RPC endpoint too
            inner["path"] = inner["root_path"] + "/"
        await self.apps[agent_id](inner, receive, send)


def _refusal(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def mount_a2a(app: FastAPI, runtime: RunService, auth: Authenticator, config: ServerConfig) -> None:
    """Serve ``/a2a/{agent}/`` and its agent card (see the module docstring)."""
    app.router.routes.append(Mount("/a2a", app=_Door(runtime, auth, config)))
