"""SnapshotSessionManager: restore, save strategies, snapshots, layout, ids, deletion (on every backend)."""

import json
import re

import pytest

from orchestra import Agent
from orchestra.conversation import NullConversationManager, SlidingWindowConversationManager
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.storage import LocalFileStorage
from orchestra.testing import FunctionModel, ScriptedModel
from tests.journal_files import holds_only_tombstones, journal_records, last_record


def make_agent(storage, session_id="s1", replies=("a", "b", "c", "d"), **manager_options):
    manager = SnapshotSessionManager(session_id, storage=storage, **manager_options)
    return Agent(model=ScriptedModel(list(replies)), session_manager=manager), manager


def records(storage_keys, layout_prefix="session/s1/scopes/agent/default/journal/"):
    return [k for k in storage_keys if k.startswith(layout_prefix)]


async def test_restores_messages_state_conversation_manager_and_system_prompt(storage):
    manager = SnapshotSessionManager("s1", storage=storage)
    agent = Agent(
        model=ScriptedModel(["one", "two"]),
        session_manager=manager,
        system_prompt="be kind",
        state={"count": 1},
        conversation_manager=SlidingWindowConversationManager(window_size=2),
    )
    await agent.invoke_async("first")
    agent.state.set("count", 2)
    await agent.invoke_async("second")
    assert agent.conversation_manager.removed_message_count == 2

    restored = Agent(
        model=ScriptedModel([]),
        session_manager=SnapshotSessionManager("s1", storage=storage),
        conversation_manager=SlidingWindowConversationManager(window_size=2),
    )
    assert restored.messages == agent.messages
    assert restored.state.get() == {"count": 2}
    assert restored.system_prompt == "be kind"
    assert restored.conversation_manager.removed_message_count == 2


async def test_save_on_invocation_writes_once_per_invocation(storage):
    agent, _ = make_agent(storage)
    journal = "session/s1/scopes/agent/default/journal/"
    before = await journal_records(storage, journal)  # (files, or lines of a segment: local files)
    await agent.invoke_async("hi")
    after = await journal_records(storage, journal)
    assert len(after) == len(before) + 1


@pytest.mark.parametrize("strategy", ["message", "invocation"])
async def test_a_failed_invocation_is_saved_rolled_back(storage, strategy):
    def crash(messages, specs):
        if len(messages) == 1:
            return "first answer"
        raise RuntimeError("model is down")

    manager = SnapshotSessionManager("s1", storage=storage, save_latest_on=strategy)
    agent = Agent(model=FunctionModel(crash), session_manager=manager)
    await agent.invoke_async("first")
    agent.state.set("before", True)
    with pytest.raises(RuntimeError):
        await agent.invoke_async("lost")
    restored, _ = make_agent(storage)
    # AfterInvocation saves what the failed invocation left: the history rolled back (the prompt
    # saved per message is dropped again), and the state, which is not rolled back.
    assert [m["content"][0]["text"] for m in restored.messages] == ["first", "first answer"]
    assert restored.state.get("before") is True


async def test_trigger_strategy_saves_only_when_asked(storage):
    agent, manager = make_agent(storage, save_latest_on="trigger")
    await agent.invoke_async("one")
    assert make_agent(storage)[0].messages == []
    await manager.save_snapshot(agent)
    assert len(make_agent(storage, session_id="s1")[0].messages) == 2


@pytest.mark.parametrize("strategy", ["message", "invocation", "trigger"])
async def test_redaction_is_persisted_under_every_strategy(storage, strategy):
    agent, manager = make_agent(storage, save_latest_on=strategy)
    if strategy == "trigger":
        await agent.invoke_async("my card is 4111 1111 1111 1111")
        await manager.save_snapshot(agent)
    else:
        await agent.invoke_async("my card is 4111 1111 1111 1111")
    agent.messages.pop()  # pretend a guardrail caught the user message before the answer was kept
    await agent.redact_latest_message("[REDACTED]")
    # What is stored (loading would then drop the unanswered user message: whole turns only).
    doc = await SnapshotSessionManager("s1", storage=storage).journal("agent", "default").load()
    assert doc is not None
    texts = [m["content"][0]["text"] for m in doc.logs["messages"]]
    assert texts == ["[REDACTED]"]


async def test_snapshot_trigger_creates_immutable_snapshots(storage):
    manager = SnapshotSessionManager(
        "s1", storage=storage, snapshot_trigger=lambda *, agent_data, **_: len(agent_data.messages) % 4 == 0
    )
    agent = Agent(model=ScriptedModel(["a", "b", "c", "d"]), session_manager=manager)
    await agent.invoke_async("First message")  # 2 messages, no snapshot
    assert await manager.list_snapshot_ids(agent) == []
    await agent.invoke_async("Second message")  # 4 messages, immutable snapshot
    assert len(await manager.list_snapshot_ids(agent)) == 1
    await agent.invoke_async("Third")
    await agent.invoke_async("Fourth")
    assert len(await manager.list_snapshot_ids(agent)) == 2


async def test_save_list_and_restore_immutable_snapshots(storage):
    agent, manager = make_agent(storage)
    await agent.invoke_async("one")
    first = await manager.save_snapshot(agent, is_latest=False, app_data={"label": "after one"})
    agent.state.set("x", 1)
    await agent.invoke_async("two")
    second = await manager.save_snapshot(agent, is_latest=False)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", first)
    ids = await manager.list_snapshot_ids(agent)
    assert ids == [first, second]
    assert await manager.list_snapshot_ids(agent, limit=1) == [first]
    assert await manager.list_snapshot_ids(agent, start_after=first) == [second]

    await manager.restore_snapshot(agent, snapshot_id=first)
    assert len(agent.messages) == 2
    assert agent.state.get() == {}
    await agent.invoke_async("branch")  # continuing from the restored point becomes the latest
    restored, _ = make_agent(storage)
    assert [m["content"][0]["text"] for m in restored.messages] == ["one", "a", "branch", "c"]
    await manager.restore_snapshot(agent, snapshot_id=second)
    assert agent.state.get() == {"x": 1}
    assert len(agent.messages) == 4


async def test_restore_snapshot_without_id_returns_to_the_latest_saved_state(storage):
    agent, manager = make_agent(storage)
    await agent.invoke_async("one")
    agent.messages.clear()
    agent.state.set("unsaved", True)
    await manager.restore_snapshot(agent)
    assert len(agent.messages) == 2
    assert agent.state.get() == {}


async def test_delete_session_removes_every_key(storage):
    agent, manager = make_agent(storage)
    await agent.invoke_async("one")
    await manager.save_snapshot(agent, is_latest=False)
    other = Agent(
        model=ScriptedModel([]),
        agent_id="other",
        session_manager=SnapshotSessionManager("s2", storage=storage),
    )
    assert other.messages == []
    assert await manager.delete_session() > 0
    # Every key of s1 that held something is gone or holds a tombstone only (which a writer that still
    # holds the session meets at its next record number).
    for key in [k for k in await storage.list("") if k.startswith("session/s1/")]:
        assert "/journal/" in key
        assert holds_only_tombstones(key, (await storage.read(key))[0])
    assert [k for k in await storage.list("") if k.startswith("session/s2/")] != []
    assert await manager.delete_session() == 0  # already deleted


async def test_layout_matches_the_documented_paths(storage):
    agent, manager = make_agent(storage)
    await agent.invoke_async("hi")
    snapshot_id = await manager.save_snapshot(agent, is_latest=False)
    keys = set(await storage.list("session/s1/"))
    base = "session/s1/scopes/agent/default/snapshots/"
    assert f"{base}snapshot_latest.json" in keys
    assert f"{base}manifest.json" in keys
    assert f"{base}immutable_history/snapshot_{snapshot_id}.json" in keys
    manifest = json.loads((await storage.read(f"{base}manifest.json"))[0])
    assert set(manifest) >= {"schema_version", "updated_at"}


async def test_export_is_one_self_contained_snapshot(storage):
    agent, manager = make_agent(storage)
    agent.state.set("k", "v")
    await agent.invoke_async("hi")
    exported = json.loads(await manager.export("default"))
    assert exported["scope"] == "agent"
    assert exported["schema_version"] == 1
    assert exported["created_at"]
    assert exported["app_data"] == {}
    assert exported["journal"] is None
    assert exported["data"]["messages"] == agent.messages
    assert exported["data"]["state"] == {"k": "v"}
    assert set(exported["data"]) >= {"conversation_manager_state", "system_prompt"}


def test_ids_are_validated():
    for bad in ["", "has space", "a/b", "../x", ".hidden", "x" * 129]:
        with pytest.raises(ValueError, match="invalid session_id"):
            SnapshotSessionManager(bad, storage=LocalFileStorage("/tmp/orchestra-unused"))


def test_bad_agent_id_is_refused(tmp_path):
    with pytest.raises(ValueError, match="invalid agent_id 'a b'"):
        Agent(agent_id="a b", session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(tmp_path)))


def test_session_id_on_agent_and_manager(tmp_path):
    manager = SnapshotSessionManager("user-123", storage=LocalFileStorage(tmp_path))
    agent = Agent(session_manager=manager)
    assert agent.session_id == "user-123"
    assert manager.session_id == "user-123"


def test_default_storage_is_local_files_in_dot_orchestra(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manager = SnapshotSessionManager("s")
    assert isinstance(manager.storage, LocalFileStorage)
    Agent(model=ScriptedModel(["x"]), session_manager=manager)("hi")
    assert (tmp_path / ".orchestra/session/s/scopes/agent/default/snapshots/snapshot_latest.json").is_file()


async def test_saves_are_incremental_and_snapshots_share_data(storage):
    agent = Agent(
        model=ScriptedModel([f"reply {i} " + "x" * 100 for i in range(120)]),
        conversation_manager=NullConversationManager(),
        session_manager=SnapshotSessionManager("s1", storage=storage),
    )
    sizes = []
    for i in range(120):
        await agent.invoke_async(f"turn {i} " + "y" * 100)
        last = records(await storage.list(""))[-1]
        sizes.append(len(last_record((await storage.read(last))[0])))  # (a segment: its last line)
    assert max(sizes[-10:]) <= max(sizes[1:11]) + 10  # a save at the end costs what it cost at the start
    snapshot_id = await agent.session_manager.save_snapshot(agent, is_latest=False)
    key = f"session/s1/scopes/agent/default/snapshots/immutable_history/snapshot_{snapshot_id}.json"
    assert len((await storage.read(key))[0]) < 400  # a reference, not a copy of 240 messages


async def test_compaction_folds_the_journal_and_loads_the_same_state(storage):
    compaction = Compaction(min_bytes=0, ratio=1.0, max_records=5)
    manager = SnapshotSessionManager("s1", storage=storage, save_latest_on="message", compaction=compaction)
    agent = Agent(
        model=ScriptedModel([f"r{i}" for i in range(30)]),
        conversation_manager=SlidingWindowConversationManager(window_size=8),
        session_manager=manager,
    )
    early = None
    for i in range(30):
        await agent.invoke_async(f"q{i}")
        if i == 3:
            early = await manager.save_snapshot(agent, is_latest=False)
    latest = json.loads(
        (await storage.read("session/s1/scopes/agent/default/snapshots/snapshot_latest.json"))[0]
    )
    assert latest["journal"]["seq"] > 5
    restored = Agent(
        model=ScriptedModel([]),
        conversation_manager=SlidingWindowConversationManager(window_size=8),
        session_manager=SnapshotSessionManager("s1", storage=storage),
    )
    assert restored.messages == agent.messages
    await restored.session_manager.restore_snapshot(restored, early)
    assert [m["content"][0]["text"] for m in restored.messages] == [
        t for i in range(4) for t in (f"q{i}", f"r{i}")
    ]
