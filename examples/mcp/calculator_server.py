"""A real MCP server (the official SDK's MCPServer), which examples/python/mcp_tools.py starts: stdio,
or streamable HTTP on a port.

python examples/mcp/calculator_server.py                 # stdio
python examples/mcp/calculator_server.py http PORT       # http://127.0.0.1:PORT/mcp
"""

import base64
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent, TextContent

server = MCPServer("calculator")

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


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
