"""The open turns a stopped Temporal run left in its folder (``orchestra.session.run_folder``): a local
resume takes the turn of each node's execution that never committed, and clears every turn blob."""

from __future__ import annotations

import json

import pytest

from orchestra.errors import SnapshotError
from orchestra.session.run_folder import COMMIT_FIELD, open_turns, run_folder, turn_key, with_open_turns
from orchestra.session.scopes import Document, ScopeLayout
from orchestra.storage import InMemoryStorage

LAYOUT = ScopeLayout("s1", "multiAgent", "g")
MESSAGES = [{"role": "user", "content": [{"text": "go"}]}]


def turn(name: str) -> bytes:
    return json.dumps({"agent": {"state": {"who": name}}, "messages": MESSAGES}).encode()


def run(**nodes: dict) -> Document:
    fields = {"run": {"run_id": "r1", "status": "executing"}, COMMIT_FIELD: "w/3"}
    return Document(fields={**fields, **{f"node/{n}": record for n, record in nodes.items()}})


async def test_the_turns_of_executions_that_never_committed_are_taken():
    storage = InMemoryStorage()
    stale = turn_key("s1", "g", "r1", "done-node", 1)  # its execution committed: the journal is newer
    newest = turn_key("s1", "g", "r1", "send-x", 10)  # a dash in a node id; listed before 9
    older = turn_key("s1", "g", "r1", "send-x", 9)
    for key, name in [(stale, "stale"), (newest, "newest"), (older, "older")]:
        await storage.write(key, turn(name))
    await storage.write(f"{run_folder('s1', 'g', 'r1')}send-x-1.json", b"{}")  # a node's blob, not a turn
    doc = run(
        **{"done-node": {"executions": 1, "result": {"execution_count": 1}}, "send-x": {"executions": 9}}
    )

    found = await open_turns(storage, LAYOUT, doc)

    assert sorted(found.keys) == sorted([stale, newest, older])
    assert list(found.turns) == ["send-x"]
    assert found.turns["send-x"]["agent"] == {"state": {"who": "newest"}}
    resumed = with_open_turns(doc, found.turns)
    assert resumed.fields["agent/send-x"] == {"state": {"who": "newest"}}
    assert resumed.logs["agent/send-x/messages"] == MESSAGES
    assert "agent/send-x" not in doc.fields  # the loaded document is left as it was


async def test_a_run_that_never_went_through_temporal_reads_no_folder():
    storage = InMemoryStorage()
    await storage.write(turn_key("s1", "g", "r1", "a", 1), turn("a"))
    doc = run()
    del doc.fields[COMMIT_FIELD]

    found = await open_turns(storage, LAYOUT, doc)

    assert found.turns == {}
    assert found.keys == []


async def test_a_damaged_turn_blob_is_refused_naming_it():
    storage = InMemoryStorage()
    key = turn_key("s1", "g", "r1", "a", 1)
    await storage.write(key, b'{"agent": {}')  # cut short

    with pytest.raises(SnapshotError, match=f"{key}: node 'a'"):
        await open_turns(storage, LAYOUT, run(a={"executions": 1}))
