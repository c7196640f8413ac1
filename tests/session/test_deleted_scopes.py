"""A deleted session is gone for every writer that still holds it (issue 35, item 2): a delete leaves a
tombstone at each journal record number it could be written at, so a writer kept in memory, up to date
or behind, meets the delete at its next record and writes nothing; its next use of the session starts
afresh, and the id goes on being usable."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestra import Agent
from orchestra.errors import SessionConflictError, StorageError
from orchestra.session import Compaction, SnapshotSessionManager, admin
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import InMemoryStorage, LocalFileStorage
from orchestra.testing import Fault, FaultyStorage, FunctionModel
from tests.journal_files import holds_only_tombstones, journal_records
from tests.session.test_fault_schedules import BUSY, SETTINGS

STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"


def turns_seen(messages: list[dict[str, Any]], tool_specs: Any) -> str:
    """How many user turns the model was given: what a reply says about the history it saw."""
    return f"turn {sum(1 for m in messages if m['role'] == 'user')}"


def agent_on(storage: Any, compaction: Compaction | None = None) -> Agent:
    manager = SnapshotSessionManager("s1", storage=storage, compaction=compaction)
    return Agent(model=FunctionModel(turns_seen), session_manager=manager)


def users(agent: Agent) -> list[str]:
    return [m["content"][0]["text"] for m in agent.messages if m["role"] == "user"]


@pytest.fixture
def storage(tmp_path):
    return LocalFileStorage(tmp_path / "store")


def test_a_writer_that_holds_a_deleted_session_writes_nothing(storage):
    kept = agent_on(storage)
    kept("one")
    kept("two")
    assert anyio.run(admin.delete_session, storage, "s1") > 0
    assert not anyio.run(kept.session_manager.is_current, kept)
    with pytest.raises(SessionConflictError, match="deleted"):
        kept("three")  # its model saw the old history (it was kept), but nothing of it is written
    assert users(kept) == ["one", "two"]  # the turn was rolled back
    fresh = agent_on(storage)
    assert fresh.messages == []
    assert str(fresh("again")) == "turn 1"
    assert users(agent_on(storage)) == ["again"]


def test_a_writer_left_behind_by_another_meets_the_delete_too(storage):
    behind, ahead = agent_on(storage), None
    behind("one")
    ahead = agent_on(storage)
    ahead("two")
    ahead("three")
    anyio.run(admin.delete_session, storage, "s1")
    # Its next record number held another writer's record, deleted with the session: now a tombstone.
    assert not anyio.run(behind.session_manager.is_current, behind)
    with pytest.raises(SessionConflictError, match="deleted"):
        behind("four")
    with pytest.raises(SessionConflictError, match="deleted"):
        ahead("four")
    assert agent_on(storage).messages == []


def test_a_deleted_id_is_used_again_and_its_tombstones_are_folded_away(storage):
    now = Compaction(min_bytes=0, ratio=0.0, max_records=2, delete_after=timedelta(0))
    first = agent_on(storage, now)
    for text in ("one", "two", "three"):
        first(text)
    anyio.run(admin.delete_session, storage, "s1")
    again = agent_on(storage, now)
    for text in ("a", "b", "c", "d"):
        again(text)
    assert users(agent_on(storage)) == ["a", "b", "c", "d"]
    left = anyio.run(journal_records, storage, "session/s1/scopes/agent/default/journal/")
    assert not any(record.get("deleted") for record in left)  # folded like any other record
    assert [s.session_id for s in anyio.run(admin.list_sessions, storage)] == ["s1"]


def test_a_deleted_session_is_not_listed_and_prune_removes_its_tombstones(storage, monkeypatch):
    agent_on(storage)("one")
    other = SnapshotSessionManager("s2", storage=storage)
    Agent(model=FunctionModel(turns_seen), session_manager=other)("hi")
    anyio.run(admin.delete_session, storage, "s1")
    assert [s.session_id for s in anyio.run(admin.list_sessions, storage)] == ["s2"]
    with pytest.raises(Exception, match="no session 's1'"):
        anyio.run(admin.describe_session, storage, "s1")
    assert anyio.run(admin.delete_session, storage, "s1") == 0  # nothing left to delete
    # Tombstones of a recent delete stay (a writer may still be behind them); older ones go.
    anyio.run(admin.prune_sessions, storage, timedelta(0))
    assert anyio.run(storage.list, "session/s1/") != []
    monkeypatch.setattr("orchestra.session.admin.LIVE_WRITER_WINDOW", timedelta(0))
    assert anyio.run(admin.prune_sessions, storage, timedelta(0)) == ["s2"]
    assert anyio.run(storage.list, "session/s1/") == []
    assert anyio.run(admin.list_sessions, storage) == []  # s2 is deleted too: its tombstones, until...
    assert anyio.run(admin.prune_sessions, storage, timedelta(0)) == []
    assert anyio.run(storage.list, "session/") == []  # ...the next prune


def test_a_delete_cut_short_is_finished_by_the_next(storage):
    agent_on(storage)("one")
    agent_on(storage)("two")
    faulty = FaultyStorage(storage)
    faulty.fail("delete", "snapshot_latest")  # after the tombstone: the data is not all gone yet
    with pytest.raises(StorageError):
        anyio.run(admin.delete_session, faulty, "s1")
    assert agent_on(storage).messages == []  # deleted from its tombstone on
    anyio.run(admin.delete_session, faulty, "s1")
    for key in anyio.run(storage.list, "session/s1/"):
        assert holds_only_tombstones(key, anyio.run(storage.read, key)[0])


# -- random schedules --------------------------------------------------------------------------------------

delete_faults = st.lists(
    st.builds(
        Fault,
        operation=st.sampled_from(["write", "read", "list", "delete"]),
        key_contains=st.sampled_from(["/journal/", "snapshot_latest", "manifest", ""]),
        kind=st.sampled_from(["full", "unavailable", "reset"]),
        after=st.booleans(),
        nth=st.integers(min_value=1, max_value=6),
    ),
    max_size=4,
)


@settings(max_examples=400 if STRESS else 40, **SETTINGS)
@given(
    ops=st.lists(st.sampled_from(["a", "b", "a", "b", "delete"]), min_size=1, max_size=14),
    faults=delete_faults,
    busy=st.booleans(),
)
def test_no_writer_writes_on_from_a_deleted_session(ops, faults, busy):
    """Two writers of one session and deletes, in a random order; a delete's storage fails at random (it
    is repeated until it succeeds, as a caller would). A writer that loaded the session before a delete
    never stores a turn after it, and the session holds exactly the turns acknowledged since the last
    delete, in order."""
    storage = InMemoryStorage()
    faulty = FaultyStorage(storage)
    faulty.faults = [Fault(f.operation, f.key_contains, f.kind, f.after, f.nth) for f in faults]
    compaction = BUSY if busy else None
    writers: dict[str, tuple[Agent, int]] = {}  # name: (agent, how many deletes had been made when built)
    deletes, kept = 0, []
    for index, op in enumerate(ops):
        if op == "delete":
            while True:
                try:
                    anyio.run(admin.delete_session, faulty, "s1")
                    break
                except StorageError:
                    continue  # faults are finite: repeated, it ends
            deletes, kept = deletes + 1, []
            continue
        if op not in writers:
            writers[op] = (agent_on(storage, compaction), deletes)
        agent, built_at = writers[op]
        prompt = f"{op}{index}"
        try:
            agent(prompt)
        except SessionConflictError:
            del writers[op]  # the next turn loads the session afresh
            continue
        assert built_at == deletes, f"{prompt} was stored on a session deleted since its writer loaded it"
        kept.append(prompt)
    journal = Journal(storage, ScopeLayout("s1", "agent", "default"))
    if ops[-1] == "delete":
        assert anyio.run(journal.load) is None  # deleted last: absent (until a writer creates it again)
    assert users(agent_on(storage)) == kept
