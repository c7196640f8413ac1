"""A real MCP server (the official SDK's MCPServer) for the MCP tests: stdio, or streamable HTTP on a port.

python tests/tools/mcp_server.py                 # stdio
python tests/tools/mcp_server.py http PORT       # http://127.0.0.1:PORT/mcp
"""

import base64
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, TextContent

server = MCPServer("orchestra-test")

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def picture() -> list:
    """A one-pixel image and a caption."""
    return [
        TextContent(type="text", text="a red pixel"),
        ImageContent(type="image", data=base64.b64encode(PIXEL).decode(), mime_type="image/png"),
    ]


@server.tool()
def idempotency_key(ctx: Context) -> str:
    """The idempotency key this call's request carried in its _meta (or 'none')."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("orchestra/idempotency-key", "none"))


@server.tool()
def crash() -> str:
    """The server process dies in the middle of the call."""
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return "late"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
