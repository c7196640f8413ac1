"""The MCP door's ``memory_recall`` tool, through the official ``mcp`` client: the caller's memory only."""

from __future__ import annotations

import pytest

from orchestra.client import Client
from tests.server.conftest import KEYS, Server
from tests.server.protocols.test_mcp_server import Sdk
from tests.server.test_memory_routes import support_config

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("memory")
    with Server(support_config(root, f"file:{root}/store")) as running:
        yield running


async def test_recall_finds_the_callers_memories_and_no_one_elses(memory_server: Server) -> None:
    with Client(memory_server.url, KEYS["acme"]) as acme:
        acme.memory.put(["customers"], "ana", {"text": "Ana's order 4417 shipped on Monday"})
    async with Sdk(memory_server.url) as session:
        listed = await session.list_tools()
        assert "memory_recall" in [tool.name for tool in listed.tools]
        found = await session.call_tool("memory_recall", {"query": "order 4417", "namespace": ["customers"]})
    assert found.is_error is False
    assert [item["key"] for item in found.structured_content["items"]] == ["ana"]
    assert "- ana: Ana's order 4417 shipped on Monday" in found.content[0].text
    async with Sdk(memory_server.url, "globex") as session:
        other = await session.call_tool("memory_recall", {"query": "order 4417"})
    assert other.is_error is False
    assert other.structured_content["items"] == []
    assert other.content[0].text == "(nothing remembered)"


@pytest.mark.parametrize(
    "arguments",
    [{}, {"query": ""}, {"query": "x", "namespace": [".."]}, {"query": "x", "workspace": "globex"}],
)
async def test_a_bad_recall_is_an_error_result(memory_server: Server, arguments: dict) -> None:
    async with Sdk(memory_server.url) as session:
        result = await session.call_tool("memory_recall", arguments)
    assert result.is_error is True
