"""The MCP door's ``memory_recall`` tool: search the caller's memory, as the agents' ``recall`` does.

It maps a call to one ``WorkspaceMemory.search`` of the caller's workspace, under the namespace the
caller is bound to (an API key: its workspace's); the arguments name a namespace under that, never
beside it.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

from orchestra.errors import ConfigurationError
from orchestra.hosting import RunService
from orchestra.hosting.identity import memory_subject

__all__ = ["RECALL_TOOL", "recall"]

RECALL_TOOL = types.Tool(
    name="memory_recall",
    description="Recall remembered facts from your memory, the most relevant to the query first.",
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in words."},
            "namespace": {
                "type": "array",
                "items": {"type": "string", "pattern": r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"},
                "description": "Only under this namespace of yours (default: all of yours).",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def recall(runtime: RunService, workspace: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """Search the caller's memory; the items as JSON text and structured content."""
    unknown = set(arguments) - {"query", "namespace", "limit"}
    if unknown:
        return _error(f"unknown arguments {sorted(unknown)}: give query, namespace, limit")
    query, namespace, limit = (
        arguments.get("query"),
        arguments.get("namespace") or [],
        arguments.get("limit", 5),
    )
    if not isinstance(query, str) or not query.strip():
        return _error("query is required: what to look for, as a non-empty string")
    if not (isinstance(namespace, list) and all(isinstance(part, str) for part in namespace)):
        return _error("namespace is a list of strings")
    if not isinstance(limit, int) or not 1 <= limit <= 50:
        return _error("limit is a whole number from 1 to 50")
    try:
        found = await runtime.workspaces.memory.search(
            workspace, memory_subject(), namespace, query, None, limit
        )
    except (ConfigurationError, ValueError) as exc:
        return _error(str(exc))
    items = [item.plain() for item in found]
    text = "\n".join(
        f"- {item['key']}: {item['value'].get('text', json.dumps(item['value']))}" for item in items
    )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text or "(nothing remembered)")],
        structured_content={"items": items},
    )
