"""Every Python example of the state-management document (seed 000), under orchestra's names.

Where the document's agent talks to a hosted model, these use a ScriptedModel so the outputs are known.
"""

import pytest

from orchestra import Agent, ToolContext, tool
from orchestra.conversation import SlidingWindowConversationManager
from orchestra.testing import ScriptedModel, ToolCall
from orchestra.tools import notebook


def test_conversation_history_is_read_off_the_agent():
    agent = Agent(model=ScriptedModel(["Hi! How can I help?"]))
    agent("Hello!")
    assert agent.messages == [
        {"role": "user", "content": [{"text": "Hello!"}]},
        {"role": "assistant", "content": [{"text": "Hi! How can I help?"}]},
    ]


def test_initial_messages_continue_a_prior_conversation():
    model = ScriptedModel(["Your name is Strands."])
    agent = Agent(
        model=model,
        messages=[
            {"role": "user", "content": [{"text": "Hello, my name is Strands!"}]},
            {"role": "assistant", "content": [{"text": "Hi there! How can I help you today?"}]},
        ],
    )
    result = agent("What's my name?")
    assert str(result) == "Your name is Strands."
    assert [m["content"][0]["text"] for m in model.requests[0].messages] == [
        "Hello, my name is Strands!",
        "Hi there! How can I help you today?",
        "What's my name?",
    ]


def test_direct_tool_calls_are_recorded_unless_asked_not_to():
    agent = Agent(tools=[notebook])
    agent.tool.notebook(mode="create", name="ideas", new_str="# Project ideas")
    recorded = len(agent.messages)
    listing = agent.tool.notebook(mode="list", record_direct_tool_call=False)
    assert recorded == 4
    assert len(agent.messages) == recorded
    assert listing["content"] == [{"text": "ideas"}]
    assert agent.messages[1]["content"][0]["toolUse"]["input"] == {
        "mode": "create",
        "name": "ideas",
        "new_str": "# Project ideas",
    }


def test_sliding_window_conversation_manager_with_custom_window():
    conversation_manager = SlidingWindowConversationManager(window_size=10)
    agent = Agent(
        model=ScriptedModel([f"reply {i}" for i in range(8)]), conversation_manager=conversation_manager
    )
    for i in range(8):
        agent(f"message {i}")
    assert len(agent.messages) == 10
    assert agent.messages[0]["content"][0]["text"] == "message 3"
    assert conversation_manager.removed_message_count == 6


def test_agent_state_basic_usage():
    agent = Agent(state={"user_preferences": {"theme": "dark"}, "session_count": 0})
    assert agent.state.get("user_preferences") == {"theme": "dark"}
    agent.state.set("last_action", "login")
    agent.state.set("session_count", 1)
    assert agent.state.get() == {
        "user_preferences": {"theme": "dark"},
        "session_count": 1,
        "last_action": "login",
    }
    agent.state.delete("last_action")
    assert agent.state.get() == {"user_preferences": {"theme": "dark"}, "session_count": 1}


def test_state_validation_and_safety():
    agent = Agent()
    agent.state.set("string_value", "hello")
    agent.state.set("number_value", 42)
    agent.state.set("boolean_value", True)
    agent.state.set("list_value", [1, 2, 3])
    agent.state.set("dict_value", {"nested": "data"})
    agent.state.set("null_value", None)
    with pytest.raises(ValueError, match="'function'"):
        agent.state.set("function", lambda x: x)
    assert len(agent.state.get()) == 6


@tool(context=True)
def track_user_action(action: str, tool_context: ToolContext):
    """Track user actions in agent state.

    Args:
        action: The action to track
    """
    action_count = tool_context.agent.state.get("action_count") or 0
    tool_context.agent.state.set("action_count", action_count + 1)
    tool_context.agent.state.set("last_action", action)
    return f"Action '{action}' recorded. Total actions: {action_count + 1}"


@tool(context=True)
def get_user_stats(tool_context: ToolContext):
    """Get user statistics from agent state."""
    action_count = tool_context.agent.state.get("action_count") or 0
    last_action = tool_context.agent.state.get("last_action") or "none"
    return f"Actions performed: {action_count}, Last action: {last_action}"


def test_using_state_in_tools():
    model = ScriptedModel(
        [
            ToolCall("track_user_action", {"action": "logged in"}),
            "Done.",
            ToolCall("track_user_action", {"action": "viewed profile"}),
            "Done.",
            ToolCall("get_user_stats"),
            "You did 2 things.",
        ]
    )
    agent = Agent(model=model, tools=[track_user_action, get_user_stats])
    agent("Track that I logged in")
    agent("Track that I viewed my profile")
    assert agent.state.get("action_count") == 2
    assert agent.state.get("last_action") == "viewed profile"
    agent("What have I done?")
    stats = agent.messages[-2]["content"][0]["toolResult"]["content"][0]["text"]
    assert stats == "Actions performed: 2, Last action: viewed profile"


def test_invocation_state():
    @tool(context=True)
    def whoami(tool_context: ToolContext) -> str:
        """Return the user ID carried in the invocation state."""
        user_id = tool_context.invocation_state.get("user_id", "unknown")
        return f"Current user: {user_id}"

    agent = Agent(model=ScriptedModel([ToolCall("whoami"), "You are u-1."]), tools=[whoami])
    state = {"request_id": "r-42", "user_id": "u-1"}
    result = agent("Who am I?", invocation_state=state)
    assert result.state is state
    assert result.state == {"request_id": "r-42", "user_id": "u-1"}
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "Current user: u-1"}]
