"""The protocol doors of `orchestra serve`: MCP, A2A and AG-UI (needs the protocols extra: pip install -e '.[protocols]').

It serves examples/server/server.yaml in this process (storage in a temporary folder), then talks to it
the way an MCP client, an A2A agent and an AG-UI front end would.
Run: python examples/python/protocol_doors.py [mcp|a2a|ag-ui]     (all three without an argument)"""

from __future__ import annotations

import contextlib
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import uvicorn

from orchestra import Agent
from orchestra.models.scripted import ScriptedModel, ToolCall
from orchestra.server import create_app, load_config

CONFIG = Path(__file__).parent.parent / "server" / "server.yaml"
KEY = {"Authorization": "Bearer my-secret-key"}  # the key whose hash server.yaml lists


@contextlib.contextmanager
def serving() -> Iterator[str]:
    """`orchestra serve examples/server/server.yaml` on a free port; yields its URL."""
    with tempfile.TemporaryDirectory() as folder:
        config = load_config(CONFIG).model_copy(update={"storage": f"file:{folder}"})
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(create_app(config), port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(10)


async def mcp(url: str) -> None:
    """Each hosted agent is a tool of the MCP server at /mcp: here our own MCPClient calls the swarm."""
    from orchestra.tools.mcp import MCPClient

    async with MCPClient.http(f"{url}/mcp", headers=KEY) as server:
        model = ScriptedModel([ToolCall("support", {"input": "I was charged twice."}), "Support is on it."])
        agent = Agent(model=model, tools=[server])
        print("mcp tools:", ", ".join(agent.tool_registry.names))
        await agent.invoke_async("Ask support about my double charge.")
        answer = agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"]
        print("mcp: support answered:", answer.splitlines()[0])


async def a2a(url: str) -> None:
    """Each hosted agent is an A2A agent at /a2a/{id}/: an agent calls one as a tool (its card names it)."""
    from orchestra.tools.a2a import a2a_tool

    assistant = await anyio.to_thread.run_sync(lambda: a2a_tool(f"{url}/a2a/assistant", headers=KEY))
    model = ScriptedModel([ToolCall("assistant", {"input": "hello over A2A"}), "done"])
    agent = Agent(model=model, tools=[assistant])
    await agent.invoke_async("Greet the remote assistant.")
    print("a2a: assistant answered:", agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"])


async def ag_ui(url: str) -> None:
    """POST /ag-ui/{id} streams a run as AG-UI events; decoded here with the ag-ui-protocol models."""
    from ag_ui.core import Event, RunAgentInput, UserMessage
    from pydantic import TypeAdapter

    body = RunAgentInput(
        thread_id="thread-1",
        run_id=str(uuid.uuid4()),
        messages=[UserMessage(id="m1", content="I was charged twice.")],
        tools=[],
        context=[],
        state={},
    )
    events = TypeAdapter(Event)
    kinds: list[str] = []
    async with (
        httpx.AsyncClient(timeout=60) as http,
        http.stream(
            "POST", f"{url}/ag-ui/support", content=body.model_dump_json(by_alias=True), headers=KEY
        ) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                kind = events.validate_json(line[len("data: ") :]).type.value
                if not kinds or kinds[-1] != kind:
                    kinds.append(kind)
    print("ag-ui:", " ".join(kinds))


DOORS = {"mcp": mcp, "a2a": a2a, "ag-ui": ag_ui}


def main() -> None:
    chosen = sys.argv[1:] or list(DOORS)
    with serving() as url:
        for name in chosen:
            anyio.run(DOORS[name], url)


if __name__ == "__main__":
    main()
