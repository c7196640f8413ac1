"""The AG-UI door: ``POST /ag-ui/{agent}`` takes an AG-UI ``RunAgentInput`` and answers the run's events
as AG-UI events (server-sent), built with the ``ag-ui-protocol`` package's own event types.

| runtime event | AG-UI events |
| --- | --- |
| the run starts | ``RUN_STARTED`` |
| ``state``: the agent's state (a pipeline's shared state) | ``STATE_SNAPSHOT`` the first time (``{}`` before the run's first other event if none came: an empty state is not sent), then a ``STATE_DELTA`` (JSON Patch, RFC 6902) of each change |
| text | ``TEXT_MESSAGE_START`` (once per message), ``TEXT_MESSAGE_CONTENT``, ``TEXT_MESSAGE_END`` |
| a tool call, its result | ``TOOL_CALL_START``, ``TOOL_CALL_ARGS``, ``TOOL_CALL_END``; ``TOOL_CALL_RESULT`` |
| a graph's or swarm's node starts, stops | ``STEP_STARTED``, ``STEP_FINISHED`` |
| a handoff | ``CUSTOM`` named ``handoff`` |
| the end | ``RUN_FINISHED`` (``result`` the output; an interrupt outcome listing what is asked) or ``RUN_ERROR`` |

A tool's approval question (``orchestra.tools.approval``) is an interrupt whose ``tool_call_id`` is the
call's, ``metadata`` the request (tool, arguments, input schema) and ``response_schema`` the answer's; a
``resume`` entry answers it with that answer as its ``payload``.

The thread id is the session, so a thread goes on from run to run; the newest user message is the task
(the server keeps the history), and ``resume`` entries answer an interrupted run's questions. The state
is the server's: the request's ``state`` is not written into the agent's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    CustomEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import BaseEvent
from ag_ui.encoder import EventEncoder
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from orchestra._ids import validate_id
from orchestra.hosting import Invocation, Refused, RunService
from orchestra.hosting.approvals import APPROVAL, ApprovalAnswer
from orchestra.hosting.config import HostedSpec, ServerConfig
from orchestra.hosting.identity import Identity, may_call
from orchestra.server.auth import Authenticator
from orchestra.server.protocols._common import door_caller, output_text, trace_headers

__all__ = ["AgUiRun", "mount_agui", "state_delta"]


class AgUiRun:
    """Translates one run's runtime events into AG-UI events (see the module docstring)."""

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.state: dict[str, Any] | None = None  # the state the client holds (None: no snapshot yet)
        self._message: str | None = None  # the text message being streamed, if any

    def start(self) -> list[BaseEvent]:
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, timestamp=_now())]

    def _end_text(self) -> list[BaseEvent]:
        if self._message is None:
            return []
        ended: list[BaseEvent] = [TextMessageEndEvent(message_id=self._message)]
        self._message = None
        return ended

    def event(self, name: str, data: Any) -> list[BaseEvent]:
        """The AG-UI events for one runtime event (``RunService.stream``'s name and data)."""
        if name == "text":
            if not data["text"]:
                return []
            out: list[BaseEvent] = [] if self.state is not None else self._state({})
            if self._message is None:
                self._message = str(uuid.uuid4())
                out.append(TextMessageStartEvent(message_id=self._message, role="assistant"))
            out.append(TextMessageContentEvent(message_id=self._message, delta=data["text"]))
            return out
        out = self._end_text()  # a text message is closed before anything else is sent
        if name == "state":
            return out + self._state(data)
        if self.state is None and name != "status":
            out += self._state({})  # the run is under way and sent no state: it is empty
        if name == "tool_call":
            call_id = data["toolUseId"]
            out += [
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=data["name"]),
                ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(data.get("input") or {})),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
        elif name == "tool_result":
            texts = [b.get("text") or json.dumps(b.get("json")) for b in data.get("content", [])]
            out.append(
                ToolCallResultEvent(
                    message_id=str(uuid.uuid4()), tool_call_id=data["toolUseId"], content="\n".join(texts)
                )
            )
        elif name == "node_start":
            out.append(StepStartedEvent(step_name=data["node_id"]))
        elif name == "node_stop":
            out.append(StepFinishedEvent(step_name=data["node_id"]))
        elif name == "handoff":
            out.append(CustomEvent(name="handoff", value=data))
        return out

    def _state(self, state: dict[str, Any]) -> list[BaseEvent]:
        """The client's state becomes ``state``: a snapshot the first time, then what changed."""
        before, self.state = self.state, state
        if before is None:
            return [StateSnapshotEvent(snapshot=state)]
        delta = state_delta(before, state)
        # JSON Patch operations, validated into the package's own operation models.
        return [StateDeltaEvent.model_validate({"delta": delta})] if delta else []

    def finish(self, name: str, data: Any) -> list[BaseEvent]:
        """The last events: ``RUN_FINISHED``, or ``RUN_ERROR``."""
        out = self._end_text()
        if self.state is None and name != "error":
            out += self._state({})  # a run that sent no state has an empty one
        if name == "error":
            _, failure = data if data is not None else (None, None)
            message = failure.message if failure is not None else "the run ended without an answer"
            code = failure.code if failure is not None else "run_failed"
            return [*out, RunErrorEvent(message=message, code=code, timestamp=_now())]
        record = data
        outcome: Any = RunFinishedSuccessOutcome()
        if record.status == "interrupted":
            outcome = RunFinishedInterruptOutcome(interrupts=[_interrupt(i) for i in record.interrupts])
        result = json.loads(json.dumps(record.output, default=str))
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id, result=result, outcome=outcome, timestamp=_now()
            )
        )
        return out


def _interrupt(question: dict[str, Any]) -> Interrupt:
    """An open question as an AG-UI interrupt; a tool's approval names its tool call, carries the
    request (tool, arguments, input schema) as metadata and the answer's JSON Schema as response_schema."""
    reason = question.get("reason")
    message = None if reason is None else output_text(reason)
    if question["name"] != APPROVAL or not isinstance(reason, dict):
        return Interrupt(id=question["id"], reason=question["name"], message=message)
    return Interrupt(
        id=question["id"],
        reason=APPROVAL,
        message=f"approve {reason.get('tool')} {json.dumps(reason.get('input'))}?",
        tool_call_id=reason.get("tool_use_id"),
        response_schema=ApprovalAnswer.model_json_schema(),
        metadata=reason,
    )


def state_delta(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch (RFC 6902) that turns ``before`` into ``after``, key by key: ``remove`` for a key
    that went, ``add`` for a new one, ``replace`` for a changed value (compared as JSON, so 1 and true
    differ)."""
    delta: list[dict[str, Any]] = [
        {"op": "remove", "path": _pointer(key)} for key in before if key not in after
    ]
    for key, value in after.items():
        if key not in before:
            delta.append({"op": "add", "path": _pointer(key), "value": value})
        elif _json(before[key]) != _json(value):
            delta.append({"op": "replace", "path": _pointer(key), "value": value})
    return delta


def _pointer(key: str) -> str:
    """A JSON Pointer (RFC 6901) to a top-level key."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _now() -> int:
    return int(time.time() * 1000)


def _task(body: RunAgentInput) -> str | None:
    """The newest user message's text."""
    for message in reversed(body.messages):
        if getattr(message, "role", None) == "user":
            content: Any = message.content
            if isinstance(content, str):
                return content
            parts = content if isinstance(content, list) else []
            return "\n".join(str(part.text) for part in parts if getattr(part, "text", None))
    return None


def mount_agui(app: FastAPI, runtime: RunService, auth: Authenticator, config: ServerConfig) -> None:
    """Serve ``POST /ag-ui/{agent_id}`` (see the module docstring)."""
    hosted_by_id = {h.id: h for h in config.agents}

    @app.post("/ag-ui/{agent_id}", include_in_schema=False)
    async def agui(agent_id: str, request: Request) -> Response:
        found = await door_caller(auth, request.headers)
        if not isinstance(found, Identity):
            headers = {"WWW-Authenticate": "Bearer"} if found.status == 401 else None
            return _refusal(found.status, found.code, f"AG-UI: {found.message}", headers)
        workspace = found.workspace
        hosted = hosted_by_id.get(agent_id)
        if hosted is None or hosted.workspace != workspace or not may_call(hosted):
            return _refusal(404, "unknown_agent", f"no agent {agent_id!r} in this workspace")
        try:
            body = RunAgentInput.model_validate_json(await request.body())
        except ValidationError as exc:
            return _refusal(
                422, "invalid_request", f"the body is not an AG-UI RunAgentInput: {exc.errors()[:3]}"
            )
        try:
            invocation = _invocation(hosted, body, config)
        except ValueError as exc:
            return _refusal(422, "invalid_request", str(exc))
        invocation.trace_headers = trace_headers(request.headers)
        try:
            await runtime.admit(workspace, invocation)
        except Refused as exc:  # another user's thread: as unknown (404)
            return _refusal(exc.status, exc.code, exc.message)
        encoder = EventEncoder(accept=request.headers.get("accept", "text/event-stream"))
        return StreamingResponse(
            _events(runtime, workspace, invocation, AgUiRun(body.thread_id, body.run_id), encoder),
            media_type=encoder.get_content_type(),
        )


def _invocation(hosted: HostedSpec, body: RunAgentInput, config: ServerConfig) -> Invocation:
    session_id = validate_id(body.thread_id, "threadId")
    answers = {entry.interrupt_id: entry.payload for entry in body.resume or [] if entry.status == "resolved"}
    task = _task(body)
    if not answers and not (task and task.strip()):
        raise ValueError("messages holds no user message to run (and resume answers nothing)")
    if task is not None and len(task) > config.limits.max_input_chars:
        raise ValueError(f"the user message is over {config.limits.max_input_chars} characters")
    invocation = Invocation(
        hosted, task or json.dumps(answers, default=str), session_id, None, on_busy=config.on_busy(hosted)
    )
    invocation.answers = answers or None
    return invocation


async def _events(
    runtime: RunService, workspace: str, invocation: Invocation, run: AgUiRun, encoder: EventEncoder
) -> AsyncIterator[bytes]:
    for event in run.start():
        yield encoder.encode(event).encode()
    last: tuple[str, Any] = ("error", None)
    async for name, data in runtime.stream(workspace, invocation):
        if name in ("result", "error"):
            last = (name, data)
            continue
        for event in run.event(name, data):
            yield encoder.encode(event).encode()
    for event in run.finish(*last):
        yield encoder.encode(event).encode()
    await runtime.flush_records(workspace)


def _refusal(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)
