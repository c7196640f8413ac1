"""MCP tools against real MCP servers started with the official SDK, over stdio and streamable HTTP."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestra import Agent
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.tools.mcp import MCPClient

SERVER = str(Path(__file__).parent / "mcp_server.py")
pytestmark = pytest.mark.timeout(120)


def stdio(**options):
    return MCPClient.stdio(sys.executable, [SERVER], **options)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server():
    port = free_port()
    process = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp", process
    process.kill()
    process.wait(10)


async def test_stdio_tools_are_called_by_the_model():
    async with stdio() as client:
        agent = Agent(model=ScriptedModel([ToolCall("add", {"a": 2, "b": 3}), "5"]), tools=[client])
        assert sorted(agent.tool_registry.names) == [
            "add",
            "crash",
            "documents",
            "grow",
            "hang",
            "idempotency_key",
            "picture",
            "slow",
        ]
        result = await agent.invoke_async("2+3?")
    assert str(result) == "5"
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["status"] == "success"
    assert tool_result["content"][0] == {"text": "5"}
    assert tool_result["content"][-1] == {"json": {"result": 5}}  # the structured content
    spec = next(s for s in agent.tool_registry.specs() if s["name"] == "add")
    assert spec["inputSchema"]["json"]["required"] == ["a", "b"]


async def test_images_map_to_image_blocks_and_names_can_be_filtered_and_prefixed():
    async with stdio(include=["picture", "add"], prefix="srv_") as client:
        agent = Agent(model=ScriptedModel([ToolCall("srv_picture", {}), "seen"]), tools=[client])
        assert sorted(agent.tool_registry.names) == ["srv_add", "srv_picture"]
        await agent.invoke_async("show me")
    content = agent.messages[2]["content"][0]["toolResult"]["content"]
    assert content[0] == {"text": "a red pixel"}
    assert content[1]["image"]["format"] == "png"
    assert content[1]["image"]["source"]["bytes"].startswith(b"\x89PNG")


async def test_a_server_that_dies_mid_call_is_an_error_result_and_a_log_line(caplog):
    async with stdio(timeout=10) as client:
        agent = Agent(model=ScriptedModel([ToolCall("crash", {}), "it failed"]), tools=[client])
        started = time.monotonic()
        result = await agent.invoke_async("try it")
        assert time.monotonic() - started < 10
    assert str(result) == "it failed"
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["status"] == "error"
    assert "failed" in tool_result["content"][0]["text"]


async def test_a_hanging_call_times_out_instead_of_hanging():
    async with stdio(timeout=2) as client:
        agent = Agent(model=ScriptedModel([ToolCall("hang", {}), "gave up"]), tools=[client])
        started = time.monotonic()
        await agent.invoke_async("try")
        assert time.monotonic() - started < 8
    error = agent.messages[2]["content"][0]["toolResult"]
    assert error["status"] == "error"
    assert "no answer in time" in error["content"][0]["text"]


async def test_streamable_http_server(http_server):
    url, _ = http_server
    async with MCPClient.http(url, headers={"X-Test": "1"}) as client:
        agent = Agent(model=ScriptedModel([ToolCall("add", {"a": 20, "b": 22}), "42"]), tools=[client])
        await agent.invoke_async("20+22?")
    assert agent.messages[2]["content"][0]["toolResult"]["content"][0] == {"text": "42"}


async def test_a_dead_http_server_fails_the_call_quickly(http_server):
    url, process = http_server
    async with MCPClient.http(url, timeout=3) as client:
        agent = Agent(model=ScriptedModel([ToolCall("add", {"a": 1, "b": 1}), "no"]), tools=[client])
        process.kill()
        process.wait(10)
        started = time.monotonic()
        await agent.invoke_async("1+1?")
        assert time.monotonic() - started < 10
    assert agent.messages[2]["content"][0]["toolResult"]["status"] == "error"


def test_an_unreachable_server_is_one_clear_error():
    client = MCPClient.http(f"http://127.0.0.1:{free_port()}/mcp", connect_timeout=2)
    with pytest.raises(ConnectionError, match=r"MCP server http:http://127.0.0.1:\d+/mcp: could not connect"):
        client.start()


def test_an_agent_starts_the_client_itself_and_close_ends_the_server():
    client = stdio()
    agent = Agent(model=ScriptedModel([ToolCall("add", {"a": 1, "b": 2}), "3"]), tools=[client])
    assert client.started
    assert str(agent("1+2?")) == "3"
    client.close()
    assert not client.started


def test_yaml_agents_take_mcp_servers(tmp_path, http_server):
    from orchestra.spec import load, parse_text

    url, _ = http_server
    (tmp_path / "agent.yaml").write_text(
        f"""version: 1
kind: agent
id: calc
agents:
  - name: calc
    tools:
      - mcp: {{command: {sys.executable}, args: [{SERVER}], include: [add]}}
      - mcp: {{url: "{url}", prefix: remote_}}
    model:
      provider: scripted
      replies:
        - [{{tool: add, input: {{a: 1, b: 2}}}}, {{tool: remote_add, input: {{a: 3, b: 4}}}}]
        - "3 and 7"
"""
    )
    agent = load(tmp_path / "agent.yaml")
    assert "add" in agent.tool_registry.names
    assert "remote_picture" in agent.tool_registry.names
    assert str(agent("add")) == "3 and 7"
    results = [b["toolResult"]["content"][0] for b in agent.messages[2]["content"]]
    assert results == [{"text": "3"}, {"text": "7"}]
    for item in agent.tool_registry:
        if hasattr(item, "client"):
            item.client.close()
    with pytest.raises(
        Exception, match=r"tools\[0\].server.mcp: an mcp server needs exactly one of command, url"
    ):
        parse_text(
            "version: 1\nkind: agent\nid: x\nagents:\n  - name: x\n    tools: [{mcp: {}}]\n", "bad.yaml"
        )


async def test_a_calls_idempotency_key_reaches_the_server_in_meta():
    """The server (the official SDK's) reads the key from the tools/call request's _meta: the same key as
    the tool call's ToolContext.idempotency_key, made from the session, the scope and the call's id."""
    from orchestra.session import SnapshotSessionManager
    from orchestra.storage import InMemoryStorage
    from orchestra.tools.effects import idempotency_key

    async with stdio() as client:
        agent = await Agent.create(
            model=ScriptedModel([ToolCall("idempotency_key", {}, tool_use_id="call-7"), "ok"]),
            tools=[client],
            session_manager=SnapshotSessionManager("s1", storage=InMemoryStorage()),
        )
        await agent.invoke_async("which key?")
    received = agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    assert received == idempotency_key("s1/agent/default", "call-7")
