"""A support agent that remembers a customer across sessions.

Each conversation is its own session (its own history), but what the agent learns about a customer goes
into a ``MemoryStore`` under ``("customers", <id>)``: the ``remember`` tool writes there, and before each
model call ``MemoryContext`` puts the customer's most relevant memories into the request. The namespace is
bound when the agent is made for a customer, so the model can never read or write another customer's.

The model here is a ``FunctionModel`` (offline, deterministic) and the embedder is ``HashEmbedder``; in
production use a real model and ``BedrockEmbedder`` or ``OpenAIEmbedder``.

Run: python examples/python/support_memory.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from orchestra import Agent
from orchestra.memory import MemoryContext, MemoryStore, memory_tools
from orchestra.session import SnapshotSessionManager
from orchestra.storage import SQLiteStorage
from orchestra.testing import FunctionModel, HashEmbedder, ToolCall


def support_model(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    """Remembers what it is told to remember, recalls for questions, answers with what it found."""
    last = messages[-1]["content"]
    results = [block["toolResult"] for block in last if "toolResult" in block]
    if results:
        found = results[0]["content"][0].get("json")
        if found is None:
            return "Thanks, I have noted that on your file."
        return (
            "From your file: " + "; ".join(item["text"] for item in found) if found else "Your file is empty."
        )
    text = next(block["text"] for block in last if "text" in block)
    if text.lower().startswith("please note"):
        return ToolCall("remember", {"text": text[len("please note") :].strip(" :"), "key": "preferences"})
    return ToolCall("recall", {"query": text})


def support_agent(store: MemoryStore, customer: str, session: str, sessions: SQLiteStorage) -> Agent:
    namespace = ("customers", customer)
    return Agent(
        name="support",
        model=FunctionModel(support_model),
        system_prompt="You are a support agent.",
        tools=[memory_tools(store, namespace=namespace)],
        hooks=[MemoryContext(store, namespace=namespace, max_tokens=200)],
        session_manager=SnapshotSessionManager(session, storage=sessions),
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        storage = SQLiteStorage(Path(folder) / "support.db")  # sessions and memory in one database
        store = MemoryStore(storage, embedder=HashEmbedder())

        monday = support_agent(store, "ana", "ana-monday", storage)
        print("monday:", monday("Please note: I am on the gold plan and prefer email."))

        tuesday = support_agent(store, "ana", "ana-tuesday", storage)  # a new session, a new history
        print("tuesday:", tuesday("Which plan am I on?"))
        added = tuesday.model.requests[-1].system_prompt  # what MemoryContext put in the request
        print("context given to the model:", added.splitlines()[-1])

        other = support_agent(store, "bob", "bob-tuesday", storage)
        print("another customer:", other("Which plan am I on?"))

        assert len(tuesday.messages) == 4  # its own conversation: question, recall, result, answer
        assert "gold plan" in str(tuesday.messages[-1])
        assert "gold" not in str(other.messages)
        storage.close()
    print("completed: the agent remembered Ana across sessions, and Bob saw none of it")


if __name__ == "__main__":
    main()
