"""``orchestra serve`` as an MCP server: the official SDK's client, and our own MCPClient, against it."""

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from orchestra import Agent
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.tools.mcp import MCPClient
from tests.server.conftest import auth

pytestmark = pytest.mark.timeout(120)


class Sdk:
    """The mcp SDK's own client session over streamable HTTP, with a workspace's key."""

    def __init__(self, url, workspace="acme"):
        self.url = f"{url}/mcp"
        self.headers = auth(workspace)

    async def __aenter__(self):
        self._http = httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30))
        await self._http.__aenter__()
        self._streams = streamable_http_client(self.url, http_client=self._http)
        read, write = (await self._streams.__aenter__())[:2]
        self._session = ClientSession(read, write)
        session = await self._session.__aenter__()
        await session.initialize()
        return session

    async def __aexit__(self, *exc):
        await self._session.__aexit__(*exc)
        await self._streams.__aexit__(*exc)
        await self._http.__aexit__(*exc)


async def test_each_hosted_agent_of_the_workspace_is_a_tool(server):
    async with Sdk(server.url) as session:
        listed = await session.list_tools()
    assert sorted(t.name for t in listed.tools) == [
        "approval",
        "chat",
        "helper",
        "memory_recall",
    ]  # not globex's "other"
    chat = next(t for t in listed.tools if t.name == "chat")
    assert chat.description == "An echoing chat agent"
    assert chat.input_schema["properties"]["input"]["type"] == "string"


async def test_a_call_runs_the_agent_and_a_session_goes_on(server):
    async with Sdk(server.url) as session:
        first = await session.call_tool("chat", {"input": "hello"})
        assert first.is_error is False
        assert first.content[0].text == "echo: hello (turn 1)"
        session_id = first.structured_content["session_id"]
        second = await session.call_tool("chat", {"input": "again", "session_id": session_id})
    assert second.content[0].text == "echo: again (turn 2)"


async def test_an_interrupt_is_a_result_that_says_what_is_asked_and_an_answer_resumes(server):
    async with Sdk(server.url) as session:
        asked = await session.call_tool("approval", {"input": "ship v2"})
        assert asked.is_error is False
        assert asked.structured_content["status"] == "interrupted"
        (interrupt,) = asked.structured_content["interrupts"]
        assert "approve" in asked.content[0].text
        assert "ship it?" in asked.content[0].text
        assert interrupt["id"] in asked.content[0].text
        answered = await session.call_tool(
            "approval",
            {"session_id": asked.structured_content["session_id"], "answers": {interrupt["id"]: "yes"}},
        )
    assert answered.structured_content["status"] == "completed"
    assert answered.content[0].text == "human said yes"


async def test_a_bad_call_is_an_error_result_naming_the_problem(server):
    async with Sdk(server.url) as session:
        missing = await session.call_tool("chat", {})
        other = await session.call_tool("other", {"input": "hi"})
    assert missing.is_error is True
    assert "input is required" in missing.content[0].text
    assert other.is_error is True
    assert "no agent 'other'" in other.content[0].text


async def test_our_own_mcp_client_calls_a_pipeline_and_gets_its_output(server):
    client = MCPClient.http(f"{server.url}/mcp", headers=auth(), include=["approval"])
    async with client:
        agent = Agent(
            model=ScriptedModel([ToolCall("approval", {"input": "ship it"}), "asked"]), tools=[client]
        )
        await agent.invoke_async("run the approval")
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["status"] == "success"
    assert "waiting for an answer" in result["content"][0]["text"]


def test_without_a_key_our_client_says_to_pass_headers(server):
    with pytest.raises(ConnectionError, match=r"401.*headers="):
        MCPClient.http(f"{server.url}/mcp", connect_timeout=10).start()


async def test_each_run_event_is_a_progress_notification(server):
    seen = []

    async def progress(done, total, message):
        seen.append((done, message))

    async with Sdk(server.url) as session:
        result = await session.call_tool("helper", {"input": "note it"}, progress_callback=progress)
    assert result.is_error is False
    assert [done for done, _ in seen] == list(range(1, len(seen) + 1))
    messages = [message for _, message in seen]
    assert "tool_call notebook" in messages
    assert "tool_result success" in messages
