import pytest

from orchestra import Agent, tool
from orchestra.testing import ScriptedModel


@tool
def double(x: int) -> int:
    """Double a number.

    Args:
        x: the number
    """
    return 2 * x


def test_direct_call_runs_the_tool_and_records_a_valid_exchange():
    agent = Agent(tools=[double])
    result = agent.tool.double(x=21)
    assert result["status"] == "success"
    assert result["content"] == [{"text": "42"}]
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "user", "assistant"]
    tool_use = agent.messages[1]["content"][0]["toolUse"]
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_use["name"] == "double"
    assert tool_use["input"] == {"x": 21}
    assert tool_result["toolUseId"] == tool_use["toolUseId"]


def test_recorded_call_is_followed_by_a_normal_turn():
    model = ScriptedModel(["noted"])
    agent = Agent(model=model, tools=[double])
    agent.tool.double(x=1)
    agent("and now?")
    assert len(model.requests[0].messages) == 5


def test_record_false_per_call_and_per_agent_leaves_history_untouched():
    agent = Agent(tools=[double])
    agent.tool.double(x=1, record_direct_tool_call=False)
    assert agent.messages == []
    quiet = Agent(tools=[double], record_direct_tool_call=False)
    quiet.tool.double(x=1)
    assert quiet.messages == []
    quiet.tool.double(x=1, record_direct_tool_call=True)
    assert len(quiet.messages) == 4


def test_unknown_tool_name_lists_the_tools():
    agent = Agent(tools=[double], name="calc")
    with pytest.raises(AttributeError, match=r"'calc' has no tool 'triple'; its tools: double"):
        agent.tool.triple(x=1)


def test_tool_names_with_dashes_are_reachable_with_underscores():
    agent = Agent(tools=[tool(name="get-time")(lambda: "noon")])
    assert agent.tool.get_time()["content"] == [{"text": "noon"}]


def test_direct_call_errors_become_error_results():
    agent = Agent(tools=[double])
    result = agent.tool.double(x="not a number")
    assert result["status"] == "error"
    assert "invalid input" in result["content"][0]["text"]


async def test_direct_call_inside_a_running_loop():
    agent = Agent(tools=[double])
    assert agent.tool.double(x=2)["content"] == [{"text": "4"}]


def test_a_direct_call_has_an_idempotency_key_that_the_caller_can_pin():
    from orchestra import ToolContext, tool

    keys = []

    @tool(context=True, effects=True)
    def pay(amount: int, tool_context: ToolContext) -> str:
        """Pay."""
        keys.append(tool_context.idempotency_key)
        return "paid"

    agent = Agent(model=ScriptedModel([]), tools=[pay])
    agent.tool.pay(amount=1)
    agent.tool.pay(amount=1, idempotency_key="order-42")  # repeating a call that may have run
    agent.tool.pay(amount=1, idempotency_key="order-42", record_direct_tool_call=False)
    assert keys[0].startswith("oc-")
    assert keys[1:] == ["order-42", "order-42"]
