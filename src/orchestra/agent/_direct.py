"""Direct tool calls: ``agent.tool.NAME(**kwargs)`` runs a tool without asking the model."""

from __future__ import annotations

import json
import secrets
from contextlib import AbstractContextManager
from typing import Any, Protocol

from orchestra._sync import run_sync
from orchestra.agent._loop import append_message
from orchestra.agent._tools import run_tool
from orchestra.agent.turn import TurnAgent
from orchestra.errors import AgentError
from orchestra.tools import ToolResultDict

__all__ = ["ToolCaller"]


class _Caller(TurnAgent, Protocol):
    """What a direct call uses of its agent (an ``Agent``)."""

    record_direct_tool_call: bool

    def exclusive(self, what: str) -> AbstractContextManager[None]: ...


class ToolCaller:
    """``agent.tool``: one attribute per tool of the agent."""

    def __init__(self, agent: _Caller) -> None:
        self._agent = agent

    def __getattr__(self, name: str) -> _DirectCall:
        if name.startswith("__"):
            raise AttributeError(name)
        registry = self._agent.tool_registry
        if name not in registry:
            # Tool names may contain '-', which Python attributes cannot: accept '_' in their place.
            matches = [n for n in registry.names if n.replace("-", "_") == name]
            if not matches:
                available = ", ".join(registry.names) or "none"
                raise AttributeError(
                    f"agent {self._agent.name!r} has no tool {name!r}; its tools: {available}"
                )
            name = matches[0]
        return _DirectCall(self._agent, name)

    def __dir__(self) -> list[str]:
        return self._agent.tool_registry.names


class _DirectCall:
    def __init__(self, agent: _Caller, name: str) -> None:
        self._agent = agent
        self._name = name

    def __call__(self, **kwargs: Any) -> ToolResultDict:
        """Run the tool and return its result block.

        ``record_direct_tool_call=False`` (here or on the agent) leaves the history untouched; otherwise
        the call is recorded as a valid exchange: a user note, the toolUse, its toolResult, and an
        assistant acknowledgement. The tool's ``ToolContext.idempotency_key`` is derived from a new call
        id, or is the ``idempotency_key=`` passed here (to repeat a direct call that may have run).
        """
        return run_sync(self.call_async, **kwargs)

    async def call_async(self, **kwargs: Any) -> ToolResultDict:
        agent = self._agent
        record = kwargs.pop("record_direct_tool_call", agent.record_direct_tool_call)
        invocation_state: dict[str, Any] = kwargs.pop("invocation_state", None) or {}
        key: str | None = kwargs.pop("idempotency_key", None)
        tool_use = {"toolUseId": f"tooluse_{secrets.token_hex(8)}", "name": self._name, "input": kwargs}
        with agent.exclusive("direct tool call"):
            if record and agent.pending_tools is not None:
                raise AgentError(
                    f"agent {agent.name!r} is interrupted: its last message holds tool calls that wait for "
                    f"interrupt responses, and a recorded call of {self._name!r} would land between them and "
                    "their results. Answer the interrupts first, or pass record_direct_tool_call=False"
                )
            result = await run_tool(agent, tool_use, invocation_state, key=key)
            if not record:
                return result
            length = len(agent.messages)
            try:
                for message in (
                    {
                        "role": "user",
                        "content": [
                            {
                                "text": f"agent.tool.{self._name} direct tool call.\n"
                                f"Input parameters: {json.dumps(kwargs, default=str)}\n"
                            }
                        ],
                    },
                    {"role": "assistant", "content": [{"toolUse": tool_use}]},
                    {"role": "user", "content": [{"toolResult": result}]},
                    {"role": "assistant", "content": [{"text": f"agent.tool.{self._name} was called."}]},
                ):
                    await append_message(agent, message, invocation_state)
            except BaseException:
                del agent.messages[length:]  # the four messages are recorded whole or not at all
                raise
        return result
