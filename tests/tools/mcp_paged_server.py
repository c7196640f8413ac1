"""An MCP server (the official SDK's low-level Server, over stdio) that pages its tool list: two a page."""

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

NAMES = [f"tool_{i}" for i in range(5)]
PAGE = 2


async def list_tools(ctx, params):
    start = int(params.cursor) if params is not None and params.cursor else 0
    page = NAMES[start : start + PAGE]
    tools = [Tool(name=name, description=f"Tool {name}.", input_schema={"type": "object"}) for name in page]
    following = start + PAGE
    return ListToolsResult(tools=tools, next_cursor=str(following) if following < len(NAMES) else None)


async def call_tool(ctx, params):
    return CallToolResult(content=[TextContent(type="text", text=f"{params.name} ran")])


server = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
