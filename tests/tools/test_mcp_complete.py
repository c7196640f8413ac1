"""The MCP client, complete: paged listings, every content kind, list changes, refusals that name their
cause, resources and prompts, progress. Against real servers built with the official SDK."""

import base64
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestra import Agent
from orchestra.agent.result import ToolProgressEvent
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.tools.mcp import MCPClient

HERE = Path(__file__).parent
pytestmark = pytest.mark.timeout(120)


def stdio(**options):
    return MCPClient.stdio(sys.executable, [str(HERE / "mcp_server.py")], **options)


async def test_a_paged_tool_list_reaches_the_model_whole():
    async with MCPClient.stdio(sys.executable, [str(HERE / "mcp_paged_server.py")]) as client:
        model = ScriptedModel([ToolCall("tool_4", {}), "ok"])
        agent = Agent(model=model, tools=[client])
        await agent.invoke_async("go")
    assert sorted(s["name"] for s in model.requests[0].tool_specs) == [f"tool_{i}" for i in range(5)]
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "tool_4 ran"}]


async def test_every_content_kind_reaches_the_model_with_nothing_lost():
    async with stdio(include=["documents"]) as client:
        agent = Agent(model=ScriptedModel([ToolCall("documents", {}), "ok"]), tools=[client])
        await agent.invoke_async("go")
    blocks = agent.messages[2]["content"][0]["toolResult"]["content"]
    texts = [b["text"] for b in blocks if "text" in b]
    assert any("Buy milk." in t and "notes://today" in t for t in texts)  # the embedded text resource
    images = [b["image"] for b in blocks if "image" in b]
    assert [image["format"] for image in images] == ["png"]  # the embedded image blob is an image block
    assert any("resource link" in t and "notes://today" in t for t in texts)
    assert any("audio" in t and "audio/wav" in t for t in texts)  # a named placeholder, not "[audio content]"
    assert not any(t.startswith("[") and t.endswith(" content]") for t in texts)


async def test_a_tool_list_change_is_seen_before_the_next_model_call():
    async with stdio(include=None) as client:
        model = ScriptedModel([ToolCall("grow", {}), ToolCall("shout", {"text": "hi"}), "done"])
        agent = Agent(model=model, tools=[client])
        assert "shout" not in agent.tool_registry
        await agent.invoke_async("grow, then shout")
    assert "shout" in [s["name"] for s in model.requests[1].tool_specs]
    assert agent.messages[4]["content"][0]["toolResult"]["content"][0] == {"text": "HI"}


def test_a_missing_command_says_so():
    client = MCPClient.stdio("/no/such/mcp-server-command")
    with pytest.raises(ConnectionError, match=r"command .*/no/such/mcp-server-command.* not found"):
        client.start()


@pytest.fixture
def refusing_server():
    """A real HTTP server that answers every request 401 (as a server needing a token does)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _refuse(self):
            body = b'{"error": "unauthorized"}'
            self.send_response(401)
            self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _refuse

        def do_POST(self):  # noqa: F811 - read the body first so the client sees the answer
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._refuse()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    httpd.shutdown()
    httpd.server_close()


def test_a_401_says_to_pass_headers(refusing_server):
    client = MCPClient.http(refusing_server, connect_timeout=10)
    with pytest.raises(ConnectionError, match=r"401.*headers="):
        client.start()


async def test_prompts_are_templates_and_resources_are_readable_by_a_tool():
    async with stdio(include=["add"], resources=True) as client:
        prompts = await client.list_prompts()
        assert [p.name for p in prompts] == ["summarize"]
        assert await client.get_prompt("summarize", {"topic": "tides"}) == "Summarize tides in one line."
        agent = Agent(
            model=ScriptedModel([ToolCall("read_resource", {"uri": "notes://today"}), "ok"]), tools=[client]
        )
        assert "read_resource" in agent.tool_registry
        await agent.invoke_async("read today's notes")
        description = agent.tool_registry.get("read_resource").spec["description"]
    assert "notes://today" in description  # the model is told which resources there are
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "Buy milk."}]


async def test_progress_notifications_reach_the_agent_stream():
    async with stdio(include=["slow"]) as client:
        agent = Agent(model=ScriptedModel([ToolCall("slow", {}), "ok"]), tools=[client])
        events = [e async for e in agent.stream_async("go")]
    progress = [e for e in events if isinstance(e, ToolProgressEvent)]
    assert [(p.progress, p.total, p.message) for p in progress] == [(1, 2, "half way"), (2, 2, "done")]
    assert progress[0].tool_use_id == agent.messages[1]["content"][0]["toolUse"]["toolUseId"]


def test_audio_as_a_named_placeholder_is_stable():
    # The placeholder names the kind, the type and the size, so the model knows what it did not get.
    from orchestra.tools.mcp import _content

    class Audio:
        type = "audio"
        mime_type = "audio/wav"
        data = base64.b64encode(b"x" * 10).decode()

    class Result:
        def __init__(self):
            self.content = [Audio()]
            self.structured_content = None

    assert _content(Result()) == [{"text": "[audio: audio/wav, 10 bytes, not shown]"}]
