import asyncio
import logging
import re

import anyio
import pytest

from orchestra import Agent, ToolContext, tool
from orchestra.agent import MessageEvent, ResultEvent, TextChunkEvent, ToolCallEvent, ToolResultEvent
from orchestra.errors import ConcurrencyError, MaxCyclesError, ModelError
from orchestra.testing import FunctionModel, ScriptedModel, ToolCall, collect


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def test_model_tool_model_loop_and_result():
    model = ScriptedModel([ToolCall("add", {"a": 2, "b": 3}), "It is 5."])
    agent = Agent(model=model, tools=[add])
    result = agent("What is 2 + 3?")
    assert str(result) == "It is 5."
    assert result.stop_reason == "end_turn"
    assert result.message == {"role": "assistant", "content": [{"text": "It is 5."}]}
    assert result.metrics.cycles == 2
    assert result.metrics.tool_calls == 1
    usage = result.metrics.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    # usage accumulates over both model calls: the tool call turn and the answer ("It is 5." = 2 tokens)
    assert usage.output_tokens > 2
    assert result.metrics.latency_ms > 0
    roles = [m["role"] for m in agent.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["status"] == "success"
    assert tool_result["content"] == [{"text": "5"}]
    # the second model call saw the tool result
    assert model.requests[1].messages[-1] is agent.messages[2]


async def test_parallel_tool_calls_run_concurrently():
    first_started = anyio.Event()
    second_started = anyio.Event()

    @tool
    async def first() -> str:
        """Waits for the second tool."""
        first_started.set()
        await second_started.wait()
        return "one"

    @tool
    async def second() -> str:
        """Waits for the first tool."""
        second_started.set()
        await first_started.wait()
        return "two"

    agent = Agent(
        model=ScriptedModel([[ToolCall("first"), ToolCall("second")], "both done"]), tools=[first, second]
    )
    with anyio.fail_after(5):  # run one after the other, these two tools would wait forever
        result = await agent.invoke_async("go")
    assert str(result) == "both done"
    results = agent.messages[2]["content"]
    assert [r["toolResult"]["content"][0]["text"] for r in results] == ["one", "two"]


def test_cycle_limit_stops_a_model_that_never_ends_its_turn():
    model = FunctionModel(lambda messages, specs: ToolCall("add", {"a": 1, "b": 1}))
    agent = Agent(model=model, tools=[add], max_cycles=3, name="looper")
    with pytest.raises(MaxCyclesError, match=r"'looper'.*3 cycles"):
        agent("loop")
    assert len(model.requests) == 3


async def test_sync_call_works_inside_a_running_loop():
    agent = Agent(model=ScriptedModel(["from a thread"]))
    assert str(agent("hi")) == "from a thread"


async def test_stream_async_yields_typed_events_in_order():
    agent = Agent(model=ScriptedModel([ToolCall("add", {"a": 1, "b": 2}), "three"]), tools=[add])
    events = await collect(agent.stream_async("sum"))
    kinds = [type(e) for e in events]
    assert kinds == [
        MessageEvent,  # the prompt
        ToolCallEvent,
        MessageEvent,  # assistant toolUse
        ToolResultEvent,
        MessageEvent,  # toolResult
        TextChunkEvent,
        MessageEvent,  # final answer
        ResultEvent,
    ]
    assert str(events[-1].result) == "three"


async def test_overlapping_invocation_raises_concurrency_error():
    agent = Agent(model=ScriptedModel(["slow", "second"], latency=0.2), name="busy")
    async with anyio.create_task_group() as group:
        group.start_soon(agent.invoke_async, "first")
        await anyio.sleep(0.05)
        with pytest.raises(ConcurrencyError, match="'busy' is already running"):
            await agent.invoke_async("overlap")
    assert str(await agent.invoke_async("again")) == "second"
    assert len(agent.messages) == 4


def test_session_id_without_session_manager_is_random_hex():
    a, b = Agent(), Agent()
    assert re.fullmatch(r"[0-9a-f]{8}", a.session_id)
    assert a.session_id == a.session_id
    assert a.session_id != b.session_id


def test_messages_continue_a_prior_conversation():
    model = ScriptedModel(["Your name is Strands."])
    agent = Agent(
        model=model,
        messages=[
            {"role": "user", "content": [{"text": "Hello, my name is Strands!"}]},
            {"role": "assistant", "content": [{"text": "Hi there! How can I help you today?"}]},
        ],
    )
    agent("What's my name?")
    assert len(model.requests[0].messages) == 3
    assert model.requests[0].messages[0]["content"][0]["text"] == "Hello, my name is Strands!"


def test_tool_errors_become_error_results_the_model_sees(caplog):
    @tool
    def explode(reason: str) -> str:
        """Always fails.

        Args:
            reason: why
        """
        raise RuntimeError(f"boom: {reason}")

    model = ScriptedModel(
        [
            [ToolCall("explode", {"reason": "test"}), ToolCall("add", {"a": "x"}), ToolCall("missing")],
            "recovered",
        ],
        allow_unknown_tools=True,  # as a real model may make one up
    )
    agent = Agent(model=model, tools=[explode, add])
    with caplog.at_level(logging.WARNING, logger="orchestra"):
        assert str(agent("go")) == "recovered"
    [warning] = [r for r in caplog.records if r.getMessage() == "unknown_tool"]
    assert (warning.tool, warning.available) == ("missing", "add, explode")  # type: ignore[attr-defined]
    results = [b["toolResult"] for b in agent.messages[2]["content"]]
    assert all(r["status"] == "error" for r in results)
    assert "RuntimeError: boom: test" in results[0]["content"][0]["text"]
    assert "invalid input for tool 'add'" in results[1]["content"][0]["text"]
    assert "b: Field required" in results[1]["content"][0]["text"]
    assert "unknown tool 'missing'" in results[2]["content"][0]["text"]


@pytest.mark.parametrize(
    "model",
    [
        ScriptedModel([ToolCall("serach", {"q": "x"}), "never"], name="writer"),
        FunctionModel(lambda messages, specs: ToolCall("serach", {"q": "x"}), name="writer"),
    ],
    ids=["scripted", "function"],
)
def test_a_test_model_calling_a_tool_the_agent_lacks_fails_loudly(model):
    """Issue 35, item 23: not a quiet error result the test never looks at."""

    @tool
    def search(q: str) -> str:
        """Search.

        Args:
            q: what
        """
        return q

    agent = Agent(model=model, tools=[search])
    with pytest.raises(ModelError) as raised:
        agent("go")
    kind = type(model).__name__
    assert str(raised.value) == (
        f"{kind} 'writer' calls tool 'serach', which the agent does not have (its tools: search): fix the "
        "reply, or give the agent the tool (allow_unknown_tools=True tests how an agent answers a made-up "
        "tool name)"
    )
    assert agent.messages == []  # the failed turn was rolled back


def test_prompt_forms():
    model = ScriptedModel(["a", "b", "c"])
    agent = Agent(model=model)
    agent([{"text": "blocks"}])
    agent([{"role": "user", "content": [{"text": "messages"}]}])
    agent()  # continue from the history as it is
    assert [m["content"][0]["text"] for m in agent.messages if m["role"] == "user"] == ["blocks", "messages"]
    with pytest.raises(ValueError, match="a prompt is"):
        agent(42)


def test_system_prompt_reaches_the_model():
    model = ScriptedModel(["ok"])
    Agent(model=model, system_prompt="You are terse.")("hi")
    assert model.requests[0].system_prompt == "You are terse."


def test_invocation_failure_keeps_the_agent_usable():
    model = ScriptedModel([])
    agent = Agent(model=model)
    with pytest.raises(Exception, match="no reply left"):
        agent("hi")
    model.replies.append("now I answer")
    assert str(agent()) == "now I answer"


def test_tool_context_carries_agent_tool_use_and_invocation_state():
    seen = {}

    @tool(context=True)
    def inspect_context(tool_context: ToolContext) -> str:
        """Look at the context."""
        seen["agent"] = tool_context.agent
        seen["tool_use"] = tool_context.tool_use
        seen["state"] = tool_context.invocation_state
        seen["history"] = len(tool_context.agent.messages)
        return "ok"

    agent = Agent(model=ScriptedModel([ToolCall("inspect_context"), "done"]), tools=[inspect_context])
    state = {"k": "v"}
    agent("go", invocation_state=state)
    assert seen["agent"] is agent
    assert seen["tool_use"]["name"] == "inspect_context"
    assert seen["state"] is state
    assert seen["history"] == 2


def test_asyncio_run_of_invoke_async():
    agent = Agent(model=ScriptedModel(["plain asyncio"]))
    assert str(asyncio.run(agent.invoke_async("x"))) == "plain asyncio"
