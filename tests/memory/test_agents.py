"""Agents use memory: the tools keep to their namespace whatever the model asks, the context hook puts
relevant memories in the request under its token bound, and a Graph or Swarm passes its store on."""

from __future__ import annotations

import pytest

from orchestra import Agent
from orchestra.memory import MemoryStore
from orchestra.memory.context import HEADER, MemoryContext, estimate_tokens
from orchestra.memory.tools import memory_tools
from orchestra.multiagent import Graph, Swarm
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel, HashEmbedder, ScriptedModel, ToolCall


def _store(storage=None) -> MemoryStore:
    return MemoryStore(storage or InMemoryStorage(), embedder=HashEmbedder())


def _results(agent: Agent) -> list[dict]:
    return [
        block["toolResult"]
        for message in agent.messages
        for block in message["content"]
        if "toolResult" in block
    ]


def test_an_agent_remembers_and_recalls_in_its_namespace() -> None:
    store = _store()
    agent = Agent(
        model=ScriptedModel(
            [
                ToolCall("remember", {"text": "Ana prefers email over phone", "key": "contact"}),
                "Noted.",
                ToolCall("recall", {"query": "how does Ana like to be contacted"}),
                "Email.",
            ]
        ),
        tools=[memory_tools(store, namespace=("users", "ana"))],
    )
    agent("Remember: I prefer email.")
    agent("How do I like to be contacted?")
    item = store.get(("users", "ana"), "contact")
    assert item is not None
    assert item.value == {"text": "Ana prefers email over phone"}
    recalled = _results(agent)[-1]
    assert recalled["status"] == "success"
    assert recalled["content"][0]["json"][0]["key"] == "contact"


ESCAPES = [
    {"text": "x", "namespace": ["users", "bob"]},  # an argument the schema does not have
    {"text": "x", "key": "../bob/secret"},
    {"text": "x", "key": "bob/secret"},
    {"text": "x", "key": ".."},
    {"text": "x", "key": ["users", "bob"]},  # a tuple where a key goes
    {"text": "x", "key": "a" * 129},
]


@pytest.mark.parametrize("arguments", ESCAPES, ids=lambda a: repr(a)[:40])
def test_the_model_cannot_name_or_escape_the_namespace(arguments: dict) -> None:
    storage = InMemoryStorage()
    store = _store(storage)
    store.put(("users", "bob"), "secret", {"text": "Bob's secret"})
    agent = Agent(
        model=ScriptedModel(
            [
                ToolCall("remember", arguments),
                ToolCall("recall", {"query": "secret", "namespace": ["users", "bob"]}),
                ToolCall("forget", {"key": "../bob/secret"}),
                ToolCall("recall", {"query": "Bob's secret"}),
                "done",
            ]
        ),
        tools=[memory_tools(store, namespace=("users", "ana"))],
    )
    agent("try to reach bob")
    results = _results(agent)
    assert [r["status"] for r in results[:3]] == ["error", "error", "error"]
    assert results[3]["status"] == "success"
    assert results[3]["content"][0]["json"] == []
    # Bob's item is untouched, and nothing was written anywhere but under Ana's namespace.
    bob = store.get(("users", "bob"), "secret")
    assert bob is not None
    assert bob.value == {"text": "Bob's secret"}
    assert store.list_namespaces() == [("users", "bob")]
    assert store.search(("users", "ana")) == []


def test_a_bound_caller_namespace_is_the_root_and_its_store_wins() -> None:
    """Where a run binds a caller (the server does), the tools' namespace is under the caller's, in the
    caller's store, and a recall never sees another caller's items."""
    mine, other = _store(), _store()
    other.put(("workspace", "notes"), "k", {"text": "not yours"})
    agent = Agent(
        model=ScriptedModel(
            [
                ToolCall("remember", {"text": "the fact", "key": "k"}),
                ToolCall("recall", {"query": "fact"}),
                "ok",
            ]
        ),
        tools=[memory_tools(other, namespace="notes")],
    )
    agent("go", invocation_state={"memory": mine, "memory_namespace": ("users", "u1")})
    assert mine.get(("users", "u1", "notes"), "k").value == {"text": "the fact"}
    assert other.get(("workspace", "notes"), "k").value == {"text": "not yours"}
    assert [item["text"] for item in _results(agent)[1]["content"][0]["json"]] == ["the fact"]


def test_tools_without_a_store_or_namespace_say_what_is_missing() -> None:
    agent = Agent(
        model=ScriptedModel([ToolCall("recall", {"query": "x"}), "ok"]), tools=[memory_tools(namespace="n")]
    )
    agent("go")
    [result] = _results(agent)
    assert result["status"] == "error"
    assert "no memory store" in result["content"][0]["text"]
    agent = Agent(
        model=ScriptedModel([ToolCall("recall", {"query": "x"}), "ok"]), tools=[memory_tools(_store())]
    )
    agent("go")
    [result] = _results(agent)
    assert result["status"] == "error"
    assert "no memory namespace" in result["content"][0]["text"]


def test_forget_removes_one_item() -> None:
    store = _store()
    store.put(("u",), "a", {"text": "A"})
    store.put(("u",), "b", {"text": "B"})
    agent = Agent(
        model=ScriptedModel([ToolCall("forget", {"key": "a"}), ToolCall("forget", {"key": "a"}), "ok"]),
        tools=[memory_tools(store, namespace="u")],
    )
    agent("forget a")
    first, second = _results(agent)
    assert first["status"] == "success"
    assert second["status"] == "error"
    assert store.get(("u",), "a") is None
    assert store.get(("u",), "b") is not None


def test_context_puts_relevant_memories_in_the_request_under_the_bound() -> None:
    store = _store()
    store.put(("u",), "tea", {"text": "likes green tea in the morning"})
    store.put(("u",), "car", {"text": "drives a red car to work"})
    for index in range(30):
        store.put(("u",), f"filler{index}", {"text": f"unrelated note number {index} " + "word " * 20})
    model = ScriptedModel(["ok", "ok"])
    agent = Agent(
        model=model,
        system_prompt="You are helpful.",
        hooks=[MemoryContext(store, namespace="u", limit=10, max_tokens=60)],
    )
    agent("what tea do I like in the morning?")
    system = model.requests[-1].system_prompt
    assert system.startswith("You are helpful.\n\n" + HEADER)
    added = system[len("You are helpful.\n\n") :]
    assert "- tea: likes green tea in the morning" in added.splitlines()[1]  # the best first
    assert estimate_tokens(added) <= 60
    # Never stored: the history and the agent's own prompt are as they were.
    assert agent.system_prompt == "You are helpful."
    assert all(HEADER not in str(message) for message in agent.messages)


def test_context_with_nothing_that_fits_adds_nothing() -> None:
    store = _store()
    store.put(("u",), "long", {"text": "word " * 400})
    model = ScriptedModel(["ok"])
    Agent(model=model, system_prompt="S", hooks=[MemoryContext(store, namespace="u", max_tokens=20)])("word")
    assert model.requests[-1].system_prompt == "S"


def test_a_graph_passes_its_store_to_agent_and_function_nodes() -> None:
    store = _store()
    seen = {}

    def reader(node_input):
        seen["items"] = [item.value["text"] for item in node_input.memory.search(("team",))]
        return "read"

    writer = Agent(
        name="writer",
        model=ScriptedModel([ToolCall("remember", {"text": "the launch is on Friday"}), "stored"]),
        tools=[memory_tools(namespace="team")],
    )
    graph = Graph({"writer": writer, "reader": reader}, [("writer", "reader")], memory=store)
    result = graph("plan")
    assert result.status.value == "completed"
    assert seen["items"] == ["the launch is on Friday"]


def test_a_swarm_passes_its_store_to_its_agents() -> None:
    store = _store()
    store.put(("team",), "k", {"text": "the code word is marmalade"})

    def answer(messages, tools):
        return (
            "I recall marmalade"
            if "marmalade" in str(messages)
            else ToolCall("recall", {"query": "code word"})
        )

    agent = Agent(name="solo", model=FunctionModel(answer), tools=[memory_tools(namespace="team")])
    result = Swarm([agent], memory=store)("what is the code word?")
    assert result.status.value == "completed"
    assert "marmalade" in str(agent.messages[-1])
