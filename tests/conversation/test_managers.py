import pytest

from orchestra import Agent, ToolCall, tool
from orchestra.conversation import (
    NullConversationManager,
    SlidingWindowConversationManager,
    SummarizingConversationManager,
)
from orchestra.conversation._base import is_clean_start
from orchestra.errors import ContextWindowOverflowError
from orchestra.testing import FunctionModel, ScriptedModel


@tool
def fetch(n: int) -> str:
    """Fetch n characters.

    Args:
        n: how many
    """
    return "x" * n


def assert_pairs_intact(messages):
    assert is_clean_start(messages, 0)
    uses = {b["toolUse"]["toolUseId"] for m in messages for b in m["content"] if "toolUse" in b}
    results = {b["toolResult"]["toolUseId"] for m in messages for b in m["content"] if "toolResult" in b}
    assert uses == results


def test_default_manager_is_a_sliding_window_of_40():
    manager = Agent().conversation_manager
    assert isinstance(manager, SlidingWindowConversationManager)
    assert manager.window_size == 40


def test_sliding_window_keeps_newest_messages_and_never_splits_tool_pairs():
    replies = []
    for i in range(6):
        replies += [ToolCall("fetch", {"n": 1}), f"answer {i}"]
    agent = Agent(
        model=ScriptedModel(replies), tools=[fetch], conversation_manager=SlidingWindowConversationManager(5)
    )
    for i in range(6):
        agent(f"question {i}")
        assert len(agent.messages) <= 5
        assert_pairs_intact(agent.messages)
    assert agent.messages[-1]["content"][0]["text"] == "answer 5"
    state = agent.conversation_manager.get_state()
    assert state == {
        "__name__": "SlidingWindowConversationManager",
        "removed_message_count": 24 - len(agent.messages),
    }


def overflowing_model(limit, replies):
    """A model that raises ContextWindowOverflowError while the history is longer than ``limit`` chars."""
    answers = iter(replies)

    def reply(messages, specs):
        if len(repr(messages)) > limit:
            raise ContextWindowOverflowError("too long")
        return next(answers)

    return FunctionModel(reply)


def test_overflow_truncates_the_largest_tool_result_first_then_retries():
    model = overflowing_model(1500, [ToolCall("fetch", {"n": 5000}), "done"])
    agent = Agent(model=model, tools=[fetch], conversation_manager=SlidingWindowConversationManager(40))
    assert str(agent("fetch a lot")) == "done"
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["status"] == "error"
    assert "too large" in result["content"][0]["text"]
    assert len(agent.messages) == 4  # nothing dropped: truncation was enough


def test_overflow_drops_oldest_turns_when_there_is_no_result_to_truncate():
    history = []
    for i in range(10):
        history += [
            {"role": "user", "content": [{"text": f"q{i} " + "y" * 200}]},
            {"role": "assistant", "content": [{"text": f"a{i}"}]},
        ]
    model = overflowing_model(1200, ["fits now"])
    agent = Agent(model=model, messages=history, conversation_manager=SlidingWindowConversationManager(40))
    assert str(agent("latest")) == "fits now"
    assert agent.conversation_manager.removed_message_count > 0
    assert agent.messages[-2]["content"][0]["text"] == "latest"
    assert is_clean_start(agent.messages, 0)


def test_sliding_window_says_when_it_cannot_reduce_further():
    model = FunctionModel(lambda m, s: (_ for _ in ()).throw(ContextWindowOverflowError("always")))
    agent = Agent(model=model, name="stuck", conversation_manager=SlidingWindowConversationManager(40))
    with pytest.raises(ContextWindowOverflowError, match="'stuck': cannot reduce the context any further"):
        agent("x" * 100)


def test_null_manager_keeps_everything_and_passes_overflow_on():
    agent = Agent(model=ScriptedModel(["a"] * 30), conversation_manager=NullConversationManager())
    for _ in range(30):
        agent("hi")
    assert len(agent.messages) == 60
    failing = Agent(
        model=FunctionModel(lambda m, s: (_ for _ in ()).throw(ContextWindowOverflowError("x"))),
        conversation_manager=NullConversationManager(),
    )
    with pytest.raises(ContextWindowOverflowError, match="does not reduce it"):
        failing("hi")


def test_summarizing_manager_replaces_oldest_messages_with_a_summary():
    history = []
    for i in range(12):
        history += [
            {"role": "user", "content": [{"text": f"q{i} " + "z" * 200}]},
            {"role": "assistant", "content": [{"text": f"a{i}"}]},
        ]
    summarizer = ScriptedModel(["the user asked twelve questions"])
    model = overflowing_model(3000, ["answered"])
    manager = SummarizingConversationManager(
        summary_ratio=0.5, preserve_recent_messages=4, summarization_model=summarizer
    )
    agent = Agent(model=model, messages=history, conversation_manager=manager)
    assert str(agent("one more")) == "answered"
    first = agent.messages[0]
    assert first["role"] == "user"
    assert first["content"][0]["text"].endswith("the user asked twelve questions")
    assert agent.messages[1]["role"] == "assistant"
    assert manager.removed_message_count > 0
    assert manager.get_state()["summary_message"] == first
    # the summarizer saw the summarized part plus the request to summarize
    assert "Summarize the conversation" in summarizer.requests[0].last_text
    restored = SummarizingConversationManager()
    restored.restore_state(manager.get_state())
    assert restored.removed_message_count == manager.removed_message_count


def test_summarizing_manager_says_when_it_cannot_reduce():
    model = FunctionModel(lambda m, s: (_ for _ in ()).throw(ContextWindowOverflowError("x")))
    agent = Agent(
        model=model, conversation_manager=SummarizingConversationManager(preserve_recent_messages=10)
    )
    with pytest.raises(ContextWindowOverflowError, match="cannot reduce the context any further"):
        agent("hi")


def test_manager_arguments_are_validated():
    with pytest.raises(ValueError, match="window_size"):
        SlidingWindowConversationManager(0)
    with pytest.raises(ValueError, match="summary_ratio"):
        SummarizingConversationManager(summary_ratio=0.95)
