"""``keep_dropped_messages``: what a conversation manager takes out of an agent's history stays stored
(``dropped/messages``), readable as the whole conversation, and is never given to the model again."""

from __future__ import annotations

from orchestra import Agent, FunctionModel
from orchestra.conversation import SlidingWindowConversationManager, SummarizingConversationManager
from orchestra.session import SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.session.snapshot_manager import DROPPED_MESSAGES, dropped_since, whole_conversation
from orchestra.storage import InMemoryStorage


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


def test_dropped_since_follows_the_front_of_the_history():
    a, b, c, d = ({"n": i} for i in range(4))
    assert dropped_since([a, b, c], [], [c, d]) == [a, b]  # a window moved on
    assert dropped_since([a, b], [], [a, b, c]) == []  # appended only
    summary = {"summary": True}
    assert dropped_since([a, b, c], [], [summary, c]) == [a, b]  # a summary replaced the front
    assert dropped_since([c], [a, b], [b, c]) == [a]  # a rolled-back turn put b back
    assert dropped_since([a, b], [], []) == [a, b]  # cleared: everything left the front
    assert dropped_since([a, b], [], [{"n": 0}, {"n": 1}]) == []  # equal copies are the same messages


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
