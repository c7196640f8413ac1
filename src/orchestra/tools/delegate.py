"""Agents and orchestrators as tools: the caller's model delegates a request to another agent, Graph or Swarm.

``agent.as_tool()``, ``graph.as_tool()`` and ``swarm.as_tool()`` return a ``DelegateTool``. The model calls
it with ``{"input": "..."}``; the inner target runs with the caller's invocation state (the same dict) and
keeps its own conversation; its text is the tool result. A failure of the inner run (a model error, a
failed node, an interrupt nobody can answer from inside a tool) is an error result the caller's model
reads, never an exception that stops the caller. An inner agent used by an agent with a session is
saved in that session too (see ``DelegateTool._share_session``); one used by an agent node of a Graph or
Swarm is saved with the run, beside that node's agent, and restored on resume
(``RunDocument.attach_tool_agent``).
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

from orchestra.models import ToolSpec
from orchestra.tools._tool import ToolContext, ToolResultDict, check_tool_name, tool_result

__all__ = ["DelegateTool"]  # the helpers below serve a2a.py too


def tool_name_for(text: str) -> str:
    """A valid tool name made from an agent's name (other characters become ``_``; at most 64)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", text)[:64]


def ask_spec(name: str, description: str, whom: str) -> ToolSpec:
    """The spec of a tool that passes one request, ``{"input": "..."}``, to another agent (``whom``)."""
    return {
        "name": name,
        "description": description,
        "inputSchema": {
            "json": {
                "type": "object",
                "properties": {"input": {"type": "string", "description": f"What to ask {whom}, in full."}},
                "required": ["input"],
                "additionalProperties": False,
            }
        },
    }


def asked(tool_use: dict[str, Any]) -> str | None:
    """The request the model passed to such a tool, or None if it passed no text."""
    request = (tool_use.get("input") or {}).get("input")
    return request if isinstance(request, str) and request.strip() else None


def empty_request(tool_use_id: str, name: str) -> ToolResultDict:
    return tool_result(tool_use_id, f"Error: {name} needs a non-empty 'input' string", "error")


class DelegateTool:
    """An ``AgentTool`` that runs an Agent, a Graph or a Swarm on the text the model passes."""

    def __init__(self, target: Any, name: str | None = None, description: str | None = None) -> None:
        self.target = target
        self._name = check_tool_name(name or tool_name_for(str(getattr(target, "name", None) or target.id)))
        what = "agent" if _is_agent(target) else getattr(target, "kind", "pipeline")
        self._description = (
            description
            or getattr(target, "description", None)
            or f"Ask the {self._name} {what}: give it the whole request, it answers with text."
        )
        self._spec = ask_spec(self._name, self._description, f"the {what}")

    @property
    def name(self) -> str:
        return self._name

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def __repr__(self) -> str:
        return f"DelegateTool({self._name!r})"

    async def invoke(self, tool_use: dict[str, Any], context: ToolContext) -> ToolResultDict:
        tool_use_id = tool_use["toolUseId"]
        request = asked(tool_use)
        if request is None:
            return empty_request(tool_use_id, self._name)
        # The run document of the Graph or Swarm whose agent node calls this tool, if any.
        run = getattr(context.orchestrator, "document", None) if _is_agent(self.target) else None
        saved_as = (
            run.attach_tool_agent(context.agent, self._name, self.target)
            if isinstance(run, _SavesToolAgents)
            else None
        )
        try:
            await self._share_session(context.agent)
            result = await self.target.invoke_async(request, invocation_state=context.invocation_state)
        except Exception as exc:
            return tool_result(
                tool_use_id, f"Error: {self._name} failed: {type(exc).__name__}: {exc}", "error"
            )
        finally:
            if saved_as is not None and isinstance(run, _SavesToolAgents):
                run.mark_agent(saved_as)  # saved with the node that called it
        status = getattr(result, "status", None)
        if status is not None and getattr(status, "value", status) != "completed":
            reason = getattr(result, "reason", None) or status
            return tool_result(tool_use_id, f"Error: {self._name} did not complete: {reason}", "error")
        if getattr(result, "stop_reason", None) == "interrupt":
            return tool_result(
                tool_use_id,
                f"Error: {self._name} stopped to ask a human, which it cannot do as a tool",
                "error",
            )
        return tool_result(tool_use_id, str(result))

    async def _share_session(self, caller: Any) -> None:
        """An inner agent without a session of its own is saved in its caller's session, as a second agent
        of it (agent id ``<caller id>-<tool name>``): attached at its first call, which also restores what
        an earlier process saved, so its conversation survives a restart with the caller's."""
        inner = self.target
        manager = getattr(caller, "session_manager", None)
        if not _is_agent(inner) or manager is None or inner.session_manager is not None:
            return
        agent_id = inner.agent_id
        if agent_id in ("default", caller.agent_id):
            agent_id = f"{caller.agent_id}-{self._name}"[:128]
        await inner.attach_session(manager, agent_id=agent_id)


@runtime_checkable
class _SavesToolAgents(Protocol):
    """What a run document offers an agent used as a tool (``orchestra.multiagent.RunDocument``, which
    sits above this module)."""

    def attach_tool_agent(self, caller: Any, tool_name: str, agent: Any) -> str | None: ...

    def mark_agent(self, key: str) -> None: ...


def _is_agent(target: Any) -> bool:
    # An Agent says so (``Agent.kind``), as a Graph or Swarm says what it is: the agent package sits above
    # this one, so it is not imported here.
    return getattr(target, "kind", None) == "agent"
