"""``keep_dropped_messages``: what a conversation manager takes out of an agent's history stays stored
(``dropped/messages``), readable as the whole conversation, and is never given to the model again."""

from __future__ import annotations

import pytest

from orchestra import Agent, FunctionModel
from orchestra.conversation import SlidingWindowConversationManager, SummarizingConversationManager
from orchestra.errors import StorageFullError, StorageOutcomeUnknownError
from orchestra.session import SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.session.snapshot_manager import DROPPED_MESSAGES, whole_conversation
from orchestra.storage import InMemoryStorage
from orchestra.testing import FaultyStorage


def seen_by_model() -> tuple[FunctionModel, list[int]]:
    sizes: list[int] = []

    def reply(messages, tool_specs):
        sizes.append(len(messages))
        return f"reply {len(sizes)}"

    return FunctionModel(reply), sizes


def texts(messages) -> list[str]:
    return [b["text"] for m in messages for b in m["content"] if "text" in b]


async def load(storage) -> tuple[list, int]:
    doc = await Journal(storage, ScopeLayout("s", "agent", "default")).load()
    assert doc is not None
    return whole_conversation(doc)


async def test_a_sliding_window_drops_turns_from_the_model_not_from_storage():
    storage = InMemoryStorage()
    for turn in range(6):
        model, sizes = seen_by_model()
        agent = Agent(
            model=model,
            conversation_manager=SlidingWindowConversationManager(window_size=4),
            session_manager=SnapshotSessionManager("s", storage=storage, keep_dropped_messages=True),
        )
        await agent.invoke_async(f"q{turn}")
        assert sizes == [min(2 * turn + 1, 5)]  # the model is given the window and the new message
    everything, start = await load(storage)
    assert texts(everything) == [t for i in range(6) for t in (f"q{i}", "reply 1")]
    assert start == 8
    assert len(agent.messages) == 4


async def test_without_the_option_dropped_turns_are_gone_as_before():
    storage = InMemoryStorage()
    agent = Agent(
        model=seen_by_model()[0],
        conversation_manager=SlidingWindowConversationManager(window_size=2),
        session_manager=SnapshotSessionManager("s", storage=storage),
    )
    for turn in range(3):
        await agent.invoke_async(f"q{turn}")
    everything, start = await load(storage)
    assert (texts(everything), start) == (["q2", "reply 3"], 0)


async def test_a_summary_stays_where_it_was_put():
    storage = InMemoryStorage()
    model, _ = seen_by_model()
    agent = Agent(
        model=model,
        conversation_manager=SummarizingConversationManager(summary_ratio=0.5, preserve_recent_messages=2),
        session_manager=SnapshotSessionManager("s", storage=storage, keep_dropped_messages=True),
    )
    for turn in range(3):
        await agent.invoke_async(f"q{turn}")
    await agent.conversation_manager.reduce_context(agent)
    await agent.session_manager.save_snapshot(agent)
    everything, start = await load(storage)
    kept = texts(agent.messages)
    assert texts(everything)[start:] == kept  # what the model is given, summary first
    assert texts(everything)[:start] == ["q0", "reply 1", "q1", "reply 2"][:start]


def windowed(storage, reply=None, **manager) -> Agent:
    return Agent(
        model=FunctionModel(reply or (lambda messages, tool_specs: "sure")),
        conversation_manager=SlidingWindowConversationManager(window_size=2),
        session_manager=SnapshotSessionManager("s", storage=storage, keep_dropped_messages=True, **manager),
    )


async def test_repeated_messages_are_each_kept():
    # The manager notes what it cuts, so equal messages ("ok" three times, the same reply) are not
    # taken for one another.
    storage = InMemoryStorage()
    agent = windowed(storage)
    for question in ["a", "b", "ok", "ok", "ok"]:
        await agent.invoke_async(question)
    everything, start = await load(storage)
    assert texts(everything) == [t for q in ["a", "b", "ok", "ok", "ok"] for t in (q, "sure")]
    assert start == 8


async def test_turns_cut_between_saves_are_kept():
    # save_latest_on="trigger": the window moves on four times before the one save.
    storage = InMemoryStorage()
    agent = windowed(storage, save_latest_on="trigger")
    for question in ["a", "b", "c", "d"]:
        await agent.invoke_async(question)
    await agent.session_manager.save_snapshot(agent)
    everything, start = await load(storage)
    assert texts(everything) == [t for q in "abcd" for t in (q, "sure")]
    assert start == 6


async def test_a_turn_whose_save_failed_leaves_the_history_and_the_kept_log_as_they_were():
    storage = FaultyStorage(InMemoryStorage())
    agent = windowed(storage)
    await agent.invoke_async("a")
    await agent.invoke_async("b")
    storage.fail("write", "/journal/", kind="full")
    with pytest.raises(StorageFullError):
        await agent.invoke_async("c")
    assert texts(agent.messages) == ["b", "sure"]  # rolled back, the window's cut too
    assert texts(agent.dropped_messages or []) == ["a", "sure"]
    await agent.invoke_async("d")
    everything, start = await load(storage)
    assert texts(everything) == [t for q in "abd" for t in (q, "sure")]  # c never stored, nothing twice
    assert start == 4


async def test_a_save_whose_answer_was_lost_keeps_the_kept_log_whole():
    # Turn b's record is written but its answer is lost and cannot be read back: the turn is rolled
    # back in memory ("possibly stored"), and the next save settles the session to what the agent holds.
    # The turns the window cut meanwhile are all kept, each once.
    storage = FaultyStorage(InMemoryStorage())
    agent = windowed(storage)
    await agent.invoke_async("a")
    storage.fail("write", "/journal/", after=True)
    storage.fail("read", "/journal/")
    with pytest.raises(StorageOutcomeUnknownError):
        await agent.invoke_async("b")
    for question in ["c", "d", "e"]:
        await agent.invoke_async(question)
    everything, start = await load(storage)
    assert texts(everything) == [t for q in "acde" for t in (q, "sure")]
    assert texts(everything[start:]) == texts(agent.messages)
    assert start == 6


async def test_a_redacted_message_does_not_come_back_through_the_kept_log():
    storage = InMemoryStorage()
    manager = SnapshotSessionManager(
        "s", storage=storage, keep_dropped_messages=True, save_latest_on="message"
    )
    agent = Agent(model=FunctionModel(lambda messages, tool_specs: "ok"), session_manager=manager)
    await agent.initialize()
    await agent.append_message({"role": "user", "content": [{"text": "SECRET 123"}]})
    await agent.redact_latest_message("[redacted]")
    await manager._binding(agent).journal.compact()  # rewrites the snapshot from what the journal holds
    for key in await storage.list(""):
        found = await storage.read(key)
        assert found is not None
        assert b"SECRET" not in found[0], key
    everything, _ = await load(storage)
    assert texts(everything) == ["[redacted]"]


async def test_a_restored_snapshot_keeps_the_dropped_log_of_its_own_time():
    storage = InMemoryStorage()
    agent = windowed(storage)
    for question in ["a", "b"]:
        await agent.invoke_async(question)
    snapshot = await agent.session_manager.save_snapshot(agent, is_latest=False)
    await agent.invoke_async("c")  # the window cuts b, on a branch the restore abandons
    await agent.session_manager.restore_snapshot(agent, snapshot)
    await agent.invoke_async("d")
    everything, start = await load(storage)
    assert texts(everything) == [t for q in "abd" for t in (q, "sure")]
    assert start == 4


async def test_the_log_is_a_known_name_that_loads_and_exports():
    storage = InMemoryStorage()
    agent = Agent(
        model=seen_by_model()[0],
        conversation_manager=SlidingWindowConversationManager(window_size=2),
        session_manager=SnapshotSessionManager("s", storage=storage, keep_dropped_messages=True),
    )
    for turn in range(3):
        await agent.invoke_async(f"q{turn}")
    exported = await agent.session_manager.export()
    assert DROPPED_MESSAGES.encode() in exported
    again = Agent(
        model=seen_by_model()[0],
        conversation_manager=SlidingWindowConversationManager(window_size=2),
        session_manager=SnapshotSessionManager("s", storage=storage),
    )
    await again.initialize()
    assert texts(again.messages) == ["q2", "reply 3"]  # the model is given the window only
