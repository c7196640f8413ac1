"""MCP tools: an agent calls the tools of an MCP server it starts over stdio (needs the mcp extra: pip install -e '.[mcp]').
Run: python examples/python/mcp_tools.py"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from orchestra import Agent
from orchestra.models.scripted import ScriptedModel, ToolCall
from orchestra.tools.mcp import MCPClient

SERVER = Path(__file__).parent.parent / "mcp" / "calculator_server.py"


async def main() -> None:
    # A real model would choose the calls; this stand-in asks for one and then answers.
    model = ScriptedModel([ToolCall("calc_add", {"a": 19, "b": 23}), "19 + 23 = 42"])
    async with MCPClient.stdio(sys.executable, [str(SERVER)], prefix="calc_") as calculator:
        agent = Agent(model=model, tools=[calculator])
        print("tools:", ", ".join(agent.tool_registry.names))
        result = await agent.invoke_async("What is 19 + 23?")
        tool_result = agent.messages[2]["content"][0]["toolResult"]
        print("the server answered:", tool_result["content"][0]["text"])
        print("agent said:", result)


if __name__ == "__main__":
    anyio.run(main)
