"""Hosted memory: each workspace has a store; an API key is bound to its workspace's namespace.

The done-when test runs ``orchestra serve`` as a process with two API keys: an agent remembers a fact in
one session and recalls it in another; the second key's agent, routes and client never see it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from orchestra.client import Client, NotFoundError
from orchestra.server import hash_key
from tests.server.conftest import KEYS, Server, auth
from tests.server.test_concurrency import free_port, start_server

SUPPORT = """version: 1
kind: agent
id: support
memory:
  namespace: [customers]
agents:
  - name: support
    model: function:tests.memory.agents:support_reply
    tools: [memory]
"""


def support_config(root: Path, storage: str) -> Path:
    (root / "support.yaml").write_text(SUPPORT)
    config = root / "server.yaml"
    config.write_text(
        f"""version: 1
storage: {storage}
agents:
  - {{id: support, spec: support.yaml, workspace: acme}}
  - {{id: helpdesk, spec: support.yaml, workspace: globex}}
api_keys:
  - {{workspace: acme, sha256: {hash_key(KEYS["acme"])}}}
  - {{workspace: globex, sha256: {hash_key(KEYS["globex"])}}}
"""
    )
    return config


def _say(url: str, workspace: str, agent: str, session: str, text: str) -> str:
    reply = httpx.post(
        f"{url}/api/v1/agents/{agent}/invoke",
        json={"input": text, "session_id": session},
        headers=auth(workspace),
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["output"])


def test_an_agent_remembers_across_sessions_and_another_key_never_sees_it(tmp_path: Path) -> None:
    port = free_port()
    process = start_server(support_config(tmp_path, f"sqlite:{tmp_path}/server.db"), port)
    url = f"http://127.0.0.1:{port}"
    try:
        assert _say(url, "acme", "support", "monday", "remember my order number is 4417") == "Noted."
        assert "4417" in _say(url, "acme", "support", "tuesday", "what is my order number?")
        # The other workspace's agent, on the same server and storage, recalls nothing.
        assert _say(url, "globex", "helpdesk", "monday", "what is my order number?") == (
            "I have nothing on file for you."
        )
        with Client(url, KEYS["acme"]) as acme, Client(url, KEYS["globex"]) as globex:
            [item] = acme.memory.search(["customers"])
            assert item["value"] == {"text": "my order number is 4417"}
            assert acme.memory.namespaces() == [["customers"]]
            assert acme.memory.get(["customers"], item["key"])["value"] == item["value"]
            assert globex.memory.search([]) == []
            assert globex.memory.search(["customers"], query="order number") == []
            assert globex.memory.namespaces() == []
            with pytest.raises(NotFoundError):
                globex.memory.get(["customers"], item["key"])
            with pytest.raises(NotFoundError):
                globex.memory.delete(["customers"], item["key"])
            assert acme.memory.get(["customers"], item["key"])["value"] == item["value"]
    finally:
        process.terminate()
        process.wait(10)
        process.stderr.close()


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("memory")
    with Server(support_config(root, f"file:{root}/store")) as running:
        yield running


def test_routes_put_get_search_delete_and_list(memory_server: Server) -> None:
    with Client(memory_server.url, KEYS["acme"]) as client:
        version = client.memory.put(["prefs", "ana"], "drink", {"text": "green tea", "tier": 2})
        assert version
        client.memory.put(["prefs", "bob"], "drink", {"text": "coffee", "tier": 1}, ttl=3600)
        assert client.memory.get(["prefs", "ana"], "drink")["value"] == {"text": "green tea", "tier": 2}
        assert sorted(client.memory.namespaces(["prefs"])) == [["prefs", "ana"], ["prefs", "bob"]]
        found = client.memory.search(["prefs"], filter={"tier": 1})
        assert [(item["namespace"], item["value"]["text"]) for item in found] == [
            (["prefs", "bob"], "coffee")
        ]
        client.memory.delete(["prefs", "ana"], "drink")
        with pytest.raises(NotFoundError):
            client.memory.get(["prefs", "ana"], "drink")
    # The storage keeps the workspace's items under its own prefix: another's keys never name them.
    root = Path(memory_server.app.state.runtime.root.root)
    memory_files = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "memory" in p.parts]
    assert memory_files
    assert all(p.startswith("ws/acme/memory/") for p in memory_files)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/v1/memory/items/k?namespace=../globex", None),
        ("GET", "/api/v1/memory/items/k?namespace=a//..", None),
        ("PUT", "/api/v1/memory/items/k?namespace=.hidden", {"value": {"text": "x"}}),
        ("POST", "/api/v1/memory/search", {"namespace": ["a/b"]}),
        ("POST", "/api/v1/memory/search", {"namespace": [".."]}),
        ("GET", "/api/v1/memory/namespaces?prefix=..", None),
    ],
)
def test_a_namespace_that_could_leave_the_callers_is_refused(
    memory_server: Server, method: str, path: str, body: dict | None
) -> None:
    reply = httpx.request(method, memory_server.url + path, json=body, headers=auth("acme"))
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["code"] in ("invalid_request", "invalid_namespace", "invalid_search")


def test_memory_routes_need_a_key(memory_server: Server) -> None:
    reply = httpx.get(memory_server.url + "/api/v1/memory/namespaces")
    assert reply.status_code == 401


def test_a_server_with_an_embedder_searches_by_meaning(tmp_path: Path) -> None:
    config = support_config(tmp_path, f"file:{tmp_path}/store")
    config.write_text(config.read_text() + "memory: {embedder: 'orchestra.testing:HashEmbedder'}\n")
    with Server(config) as running, Client(running.url, KEYS["acme"]) as client:
        client.memory.put(["notes"], "tea", {"text": "likes green tea"})
        client.memory.put(["notes"], "car", {"text": "drives a red car"})
        found = client.memory.search(["notes"], query="which tea", limit=1)
    assert [item["key"] for item in found] == ["tea"]
    assert found[0]["score"] > 0


def test_a_bad_embedder_in_the_server_config_is_placed(tmp_path: Path) -> None:
    from orchestra.errors import ConfigurationError
    from orchestra.server import load_config

    config = support_config(tmp_path, f"file:{tmp_path}/store")
    config.write_text(
        config.read_text() + "memory:\n  embedder: 'orchestra.memory.binding:MEMORY_STATE_KEY'\n"
    )
    with pytest.raises(
        ConfigurationError, match=r"server.yaml:\d+:\d+: memory.embedder: .* is not an Embedder"
    ):
        load_config(config)
