"""``orchestra memory list/search/get/forget --storage``: what a store holds, seen and erased from the shell."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.memory import MemoryStore
from orchestra.storage import SQLiteStorage
from orchestra.testing import HashEmbedder

runner = CliRunner()


def invoke(*args: object, input: str | None = None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def _filled(db: Path) -> str:
    storage = SQLiteStorage(db)
    store = MemoryStore(storage, embedder=HashEmbedder())
    store.put(("users", "ana"), "drink", {"text": "likes green tea", "tier": 2})
    store.put(("users", "ana"), "car", {"text": "drives a red car", "tier": 1})
    store.put(("users", "bob"), "drink", {"text": "likes black coffee", "tier": 1})
    storage.close()
    return f"sqlite:{db}"


def test_list_search_get_and_forget(tmp_path: Path) -> None:
    uri = _filled(tmp_path / "memory.db")
    listed = invoke("memory", "list", "--storage", uri, "--json")
    assert listed.exit_code == 0, listed.output
    assert sorted(json.loads(listed.output)) == [["users", "ana"], ["users", "bob"]]

    found = invoke(
        "memory", "search", "users", "--storage", uri, "--query", "green tea",
        "--embedder", "orchestra.testing:HashEmbedder", "--json",
    )  # fmt: skip
    assert found.exit_code == 0, found.output
    assert json.loads(found.output)[0]["key"] == "drink"
    assert json.loads(found.output)[0]["namespace"] == ["users", "ana"]

    filtered = invoke("memory", "search", "users", "--storage", uri, "--filter", '{"tier": 1}', "--json")
    assert sorted(item["value"]["text"] for item in json.loads(filtered.output)) == [
        "drives a red car",
        "likes black coffee",
    ]

    got = invoke("memory", "get", "users/bob", "drink", "--storage", uri, "--json")
    assert json.loads(got.output)["value"] == {"text": "likes black coffee", "tier": 1}

    refused = invoke("memory", "forget", "users/ana", "--storage", uri, input="n\n")
    assert refused.exit_code == 1
    forgot = invoke("memory", "forget", "users/ana", "--storage", uri, "--yes")
    assert forgot.exit_code == 0, forgot.output
    assert "forgot users/ana" in forgot.output
    listed = invoke("memory", "list", "--storage", uri, "--json")
    assert json.loads(listed.output) == [["users", "bob"]]
    missing = invoke("memory", "get", "users/ana", "drink", "--storage", uri)
    assert missing.exit_code == 1
    assert "no item 'drink'" in missing.output


def test_failures_are_one_line_and_exit_1(tmp_path: Path) -> None:
    uri = _filled(tmp_path / "memory.db")
    bad_filter = invoke("memory", "search", "users", "--storage", uri, "--filter", "{nope")
    assert bad_filter.exit_code == 1
    assert "--filter is not JSON" in bad_filter.output
    no_embedder = invoke("memory", "search", "users", "--storage", uri, "--query", "tea")
    assert no_embedder.exit_code == 1
    assert "error:" in no_embedder.output
    everything = invoke("memory", "forget", "", "--storage", uri, "--yes")
    assert everything.exit_code == 1
    assert "forgetting everything is not offered" in everything.output
