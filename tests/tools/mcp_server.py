"""A real MCP server (the official SDK's MCPServer) for the MCP tests: stdio, or streamable HTTP on a port.

python tests/tools/mcp_server.py                 # stdio
python tests/tools/mcp_server.py http PORT       # http://127.0.0.1:PORT/mcp
"""

import base64
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

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


@server.tool()
def documents() -> list:
    """Every other content kind: an embedded text resource, an embedded blob, a resource link, audio."""
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(uri="notes://today", mime_type="text/plain", text="Buy milk."),
        ),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(
                uri="files://pixel.png", mime_type="image/png", blob=base64.b64encode(PIXEL).decode()
            ),
        ),
        ResourceLink(type="resource_link", uri="notes://today", name="today", mime_type="text/plain"),
        AudioContent(type="audio", data=base64.b64encode(b"RIFF0000WAVE").decode(), mime_type="audio/wav"),
    ]


def shout(text: str) -> str:
    """Shout the text."""
    return text.upper()


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the shout tool and tell the client its tools changed."""
    server.add_tool(shout)
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
async def slow(ctx: Context) -> str:
    """Report progress twice, then answer."""
    await ctx.report_progress(1, 2, "half way")
    await ctx.report_progress(2, 2, "done")
    return "slow done"


@server.resource("notes://today", mime_type="text/plain")
def today() -> str:
    """Today's notes."""
    return "Buy milk."


@server.prompt()
def summarize(topic: str) -> str:
    """Ask for a summary of a topic."""
    return f"Summarize {topic} in one line."


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
