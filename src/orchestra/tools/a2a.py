"""Remote A2A agents as tools, with the official ``a2a-sdk`` (the ``[a2a]`` extra).

``a2a_tool(url)`` (or ``A2AClient(url).as_tool()``) gives an agent, or a graph's agent node, a tool that
sends the model's request to the A2A agent at ``url`` and answers with its reply. The tool's name and
description come from the remote agent card unless given. Each calling agent keeps one A2A context
with the remote agent, so a conversation goes on from call to call; a remote task that ends
``input-required`` answers what it asks, and the next call of the tool answers it. The current trace
context goes along as a W3C ``traceparent`` header, under an ``invoke_agent`` CLIENT span, so the
remote agent's spans join the caller's trace.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from orchestra import tracing
from orchestra._dist import install_hint
from orchestra.errors import ConfigurationError
from orchestra.models import ToolSpec
from orchestra.tools._tool import ToolContext, ToolResultDict, check_tool_name, tool_result
from orchestra.tools.delegate import ask_spec, asked, empty_request, tool_name_for

__all__ = ["A2AClient", "A2AReply", "A2ATool", "a2a_tool"]

CARD_PATH = "/.well-known/agent-card.json"


def _sdk() -> Any:
    try:
        import a2a.client
    except ImportError:
        raise ConfigurationError("A2A tools need the official SDK: " + install_hint("a2a")) from None
    return a2a.client


@dataclass
class A2AReply:
    """What a remote agent answered: its text, the task's state, and the ids to go on with."""

    text: str
    state: str  # completed, input-required, failed, canceled, rejected, auth-required, working, message
    context_id: str
    task_id: str | None

    @property
    def ok(self) -> bool:
        return self.state in ("completed", "message", "input-required")


class A2AClient:
    """A remote A2A agent (its card is read once, from ``url`` + ``/.well-known/agent-card.json``).

    Args:
        url: the agent's base URL (where its card is), or the card's own URL.
        headers: sent with every request (``{"Authorization": "Bearer ..."}``).
        timeout: seconds for each request.
    """

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 60.0) -> None:
        _sdk()
        self.url = url.removesuffix(CARD_PATH).rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._card: Any = None

    def __repr__(self) -> str:
        return f"A2AClient({self.url!r})"

    def card(self) -> Any:
        """The remote agent card (fetched once; blocking).

        Raises:
            ConnectionError: the card could not be read; the message says why and what to do.
        """
        if self._card is None:
            from a2a.client.card_resolver import parse_agent_card

            where = f"{self.url}{CARD_PATH}"
            try:
                response = httpx.get(where, headers=self.headers, timeout=self.timeout)
            except httpx.HTTPError as exc:
                raise ConnectionError(f"A2A agent at {self.url}: cannot read its card: {exc}") from None
            _check(response, self.url)
            self._card = parse_agent_card(response.json())
        return self._card

    async def send(
        self,
        text: str,
        *,
        context_id: str | None = None,
        task_id: str | None = None,
        answers: Mapping[str, Any] | None = None,
    ) -> A2AReply:
        """Send one message (``answers`` as a data part ``{"answers": ...}``) and wait for the task to end
        or to ask for input.

        Raises:
            ConnectionError: the agent could not be reached or refused the request (named).
        """
        client_sdk = _sdk()
        from a2a.types import Message, Part, Role, SendMessageRequest
        from google.protobuf import struct_pb2

        card = self._card if self._card is not None else await _in_thread(self.card)
        context_id = context_id or str(uuid.uuid4())
        parts = [Part(text=text)]
        if answers:
            value = struct_pb2.Value()
            value.struct_value.update({"answers": dict(answers)})
            parts.append(Part(data=value))
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            parts=parts,
            context_id=context_id,
            task_id=task_id or "",
        )
        trace: dict[str, str] = {}
        _inject(trace)
        call = client_sdk.ClientCallContext(service_parameters=trace) if trace else None
        try:
            async with httpx.AsyncClient(headers=self.headers, timeout=self.timeout) as http:
                config = client_sdk.ClientConfig(httpx_client=http, streaming=False)
                client = await client_sdk.create_client(card, config)
                events = [
                    e async for e in client.send_message(SendMessageRequest(message=message), context=call)
                ]
        except client_sdk.A2AClientError as exc:
            raise ConnectionError(f"A2A agent {card.name} at {self.url} failed: {exc}") from None
        except httpx.HTTPError as exc:
            raise ConnectionError(f"A2A agent {card.name} at {self.url}: cannot reach it: {exc}") from None
        return _reply(events[-1], context_id) if events else A2AReply("", "failed", context_id, task_id)

    def as_tool(self, name: str | None = None, description: str | None = None) -> A2ATool:
        """This agent as a tool (its name and description from the card unless given)."""
        return A2ATool(self, name, description)


def a2a_tool(
    url: str,
    *,
    name: str | None = None,
    description: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> A2ATool:
    """A tool that calls the remote A2A agent at ``url`` (see the module docstring)."""
    return A2AClient(url, headers=headers, timeout=timeout).as_tool(name, description)


class A2ATool:
    """An agent tool that sends ``{"input": "..."}`` to a remote A2A agent."""

    def __init__(self, client: A2AClient, name: str | None = None, description: str | None = None) -> None:
        self.client = client
        card: Any = client.card() if name is None or description is None else None
        remote = str(card.name) if card is not None else str(name)
        self._name = check_tool_name(name or tool_name_for(remote))
        self._remote_name = remote
        self._description = (
            description or (card.description if card else "") or f"Ask the remote agent {remote}."
        )
        self._spec = ask_spec(self._name, self._description, "the remote agent")
        # Per calling agent: the A2A context it talks in, and a task of it that asks for input.
        self._contexts: dict[str, str] = {}
        self._asking: dict[str, str] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def __repr__(self) -> str:
        return f"A2ATool({self._name!r} at {self.client.url!r})"

    async def invoke(self, tool_use: dict[str, Any], context: ToolContext) -> ToolResultDict:
        tool_use_id = tool_use["toolUseId"]
        request = asked(tool_use)
        if request is None:
            return empty_request(tool_use_id, self._name)
        caller = context.agent.agent_id
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "a2a",
            "gen_ai.agent.name": self._remote_name,
            "server.address": httpx.URL(self.client.url).host,
        }
        with tracing.span(f"invoke_agent {self._remote_name}", attributes, "client") as span:
            try:
                reply = await self.client.send(
                    request, context_id=self._contexts.get(caller), task_id=self._asking.pop(caller, None)
                )
            except ConnectionError as exc:
                span.fail("ConnectionError")
                return tool_result(tool_use_id, f"Error: {exc}", "error")
            if not reply.ok:
                span.fail(reply.state)
        self._contexts[caller] = reply.context_id
        if reply.state == "input-required" and reply.task_id:
            self._asking[caller] = reply.task_id
            return tool_result(
                tool_use_id,
                f"{self._remote_name} needs an answer before it can go on: {reply.text}\n(Call {self._name} "
                "again with the answer.)",
            )
        if not reply.ok:
            detail = f": {reply.text}" if reply.text else ""
            return tool_result(
                tool_use_id, f"Error: {self._remote_name} ended {reply.state}{detail}", "error"
            )
        return tool_result(tool_use_id, reply.text or "(no answer)")


_STATES = {
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_SUBMITTED": "working",
}


def _reply(event: Any, context_id: str) -> A2AReply:
    from a2a.helpers import get_artifact_text, get_data_parts, get_message_text
    from a2a.types import TaskState

    if event.HasField("message"):
        return A2AReply(_text(event.message.parts), "message", event.message.context_id or context_id, None)
    task = event.task
    state = _STATES.get(TaskState.Name(task.status.state), "failed")
    if state == "completed":
        pieces = []
        for artifact in task.artifacts:
            text = get_artifact_text(artifact)
            data = get_data_parts(list(artifact.parts))
            pieces.append(text if text else json.dumps(data[0] if len(data) == 1 else data))
        text = "\n".join(pieces) or get_message_text(task.status.message)
    else:
        text = get_message_text(task.status.message)
    return A2AReply(text, state, task.context_id or context_id, task.id)


def _text(parts: Any) -> str:
    from a2a.helpers import get_text_parts

    return "\n".join(get_text_parts(list(parts)))


def _check(response: httpx.Response, url: str) -> None:
    if response.status_code in (401, 403):
        raise ConnectionError(
            f"A2A agent at {url} refused us (HTTP {response.status_code}): pass its credentials with "
            "headers={'Authorization': 'Bearer ...'}"
        )
    if response.status_code != 200:
        raise ConnectionError(f"A2A agent at {url}: its card answered HTTP {response.status_code}")


def _inject(headers: dict[str, str]) -> None:
    """The current trace context as ``traceparent`` (nothing without OpenTelemetry)."""
    if tracing.enabled():
        from opentelemetry import propagate

        propagate.inject(headers)


async def _in_thread(fn: Any) -> Any:
    import anyio.to_thread

    return await anyio.to_thread.run_sync(fn)
