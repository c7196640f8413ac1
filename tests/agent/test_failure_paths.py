"""Each way an invocation can go wrong, and the next request both providers must then accept."""

from __future__ import annotations

import json
import logging
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from orchestra import Agent, ToolContext, tool
from orchestra.conversation import SlidingWindowConversationManager, SummarizingConversationManager
from orchestra.errors import (
    AgentError,
    ConfigurationError,
    ContextWindowOverflowError,
    MaxCyclesError,
    ModelError,
)
from orchestra.history import EMPTY_REPLY, history_problems
from orchestra.models.bedrock import BedrockModel
from orchestra.models.openai import OpenAIModel
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel, ScriptedModel, ToolCall
from tests.models.provider_rules import bedrock_problems, openai_problems
from tests.models.servers import ChatCompletionsServer, ConverseServer, Reply, _chunk, _sse, event_message
from tests.support import cut_when

BEDROCK = BedrockModel("anthropic.claude-3-5-sonnet-20240620-v1:0", region_name="us-east-1")
OPENAI = OpenAIModel("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="k")


def assert_next_request_valid(agent: Agent) -> None:
    """The history holds the invariant and a new user turn is valid on both providers."""
    assert history_problems(agent.messages) == []
    messages = [*agent.messages, {"role": "user", "content": [{"text": "and now?"}]}]
    specs = agent.tool_registry.specs()
    assert bedrock_problems(BEDROCK.request_body(messages, specs, "sys")) == []
    assert openai_problems(OPENAI.request_body(messages, specs, "sys")) == []


@tool
def lookup(key: str) -> str:
    """Looks a key up.

    Args:
        key: what to look up
    """
    return f"value of {key}"


async def agent_after_one_turn(*replies: Any, **options: Any) -> Agent:
    agent = Agent(model=ScriptedModel(["hello", *replies]), tools=[lookup], **options)
    await agent.invoke_async("hi")
    return agent


async def test_a_model_error_after_tool_calls_rolls_the_turn_back() -> None:
    def reply(messages: list[dict[str, Any]], specs: Any) -> Any:
        if len(messages) == 1:
            return "hello"
        if messages[-1]["role"] == "user" and "toolResult" in messages[-1]["content"][0]:
            raise ModelError("throttled after every retry")
        return ToolCall("lookup", {"key": "k"})

    agent = Agent(model=FunctionModel(reply), tools=[lookup])
    await agent.invoke_async("hi")
    before = list(agent.messages)
    with pytest.raises(ModelError):
        await agent.invoke_async("look it up")
    assert agent.messages == before
    assert_next_request_valid(agent)


async def test_max_cycles_rolls_the_turn_back() -> None:
    agent = await agent_after_one_turn(*[ToolCall("lookup", {"key": "k"})] * 5, max_cycles=2)
    before = list(agent.messages)
    with pytest.raises(MaxCyclesError):
        await agent.invoke_async("loop")
    assert agent.messages == before
    assert_next_request_valid(agent)


async def test_a_timeout_while_a_tool_runs_leaves_no_tool_call_without_result() -> None:
    started = anyio.Event()

    @tool
    async def slow() -> str:
        """Takes long."""
        started.set()
        await anyio.sleep(10)
        return "late"

    agent = Agent(model=ScriptedModel(["hello", ToolCall("slow"), "never"]), tools=[slow])
    await agent.invoke_async("hi")
    await cut_when(started, lambda: agent.invoke_async("be slow"))
    assert len(agent.messages) == 2
    assert_next_request_valid(agent)
    agent.model = ScriptedModel(["again"])
    assert str(await agent.invoke_async("next")) == "again"


@pytest.mark.parametrize("how", ["aclosing", "break"])
async def test_an_abandoned_stream_releases_the_agent_at_once(how: str) -> None:
    agent = await agent_after_one_turn(ToolCall("lookup", {"key": "k"}), "found it", "second answer")
    if how == "aclosing":
        async with aclosing(agent.stream_async("look")) as events:
            async for _ in events:
                break
    else:
        async for _ in agent.stream_async("look"):
            break
    assert len(agent.messages) == 2  # rolled back to the first turn
    assert_next_request_valid(agent)
    agent.model = ScriptedModel(["second answer"])
    assert str(await agent.invoke_async("next")) == "second answer"  # no ConcurrencyError


async def test_an_empty_reply_is_stored_as_a_marker_and_returned_empty() -> None:
    agent = Agent(model=ScriptedModel([""]))
    result = await agent.invoke_async("say nothing")
    assert str(result) == ""
    assert agent.messages[-1] == {"role": "assistant", "content": [{"text": EMPTY_REPLY}]}
    assert_next_request_valid(agent)


async def test_an_empty_text_before_a_tool_call_is_dropped() -> None:
    agent = Agent(model=ScriptedModel([["", ToolCall("lookup", {"key": "k"})], "done"]), tools=[lookup])
    await agent.invoke_async("go")
    assert agent.messages[1]["content"] == [
        {"toolUse": {"toolUseId": "tooluse_1", "name": "lookup", "input": {"key": "k"}}}
    ]
    assert_next_request_valid(agent)


async def test_an_agent_without_tools_continues_a_history_with_tool_blocks() -> None:
    helper = await agent_after_one_turn(ToolCall("lookup", {"key": "k"}), "found")
    await helper.invoke_async("look")
    plain = Agent(model=ScriptedModel(["ok"]), messages=helper.messages)
    assert plain.tool_registry.specs() == []
    assert_next_request_valid(plain)
    request = BEDROCK.request_body([*plain.messages, {"role": "user", "content": [{"text": "q"}]}])
    assert "[called tool lookup with" in json.dumps(request["messages"])


async def test_a_recorded_direct_call_is_refused_while_interrupted() -> None:
    @tool(context=True)
    def approve(tool_context: ToolContext) -> str:
        """Asks a human."""
        return str(tool_context.interrupt("approve"))

    agent = Agent(model=ScriptedModel([ToolCall("approve"), "approved"]), tools=[approve, lookup])
    result = await agent.invoke_async("go")
    assert result.stop_reason == "interrupt"
    with pytest.raises(AgentError, match="Answer the interrupts first"):
        await agent.tool.lookup.call_async(key="k")
    await agent.tool.lookup.call_async(key="k", record_direct_tool_call=False)
    responses = [{"interruptResponse": {"interruptId": i.id, "response": "yes"}} for i in result.interrupts]
    assert str(await agent.invoke_async(responses)) == "approved"
    assert_next_request_valid(agent)


def test_tool_names_providers_refuse_are_refused_at_definition() -> None:
    with pytest.raises(ConfigurationError, match=r"'lookup_user'"):

        @tool(name="lookup.user")
        def lookup_user() -> str:
            """Never defined."""
            return ""

    with pytest.raises(ConfigurationError, match="1-64 letters"):
        tool(name="x" * 65)(lambda: "")


def test_tools_whose_annotations_exist_only_for_type_checkers() -> None:
    from tests.tools import typing_only_tools

    agent = Agent(
        model=ScriptedModel([ToolCall("whoami", {"greeting": "hi"}), "done"]),
        tools=[typing_only_tools.whoami],
        name="ada",
    )
    agent("go")
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "hi, ada"}]
    norm = typing_only_tools.make_local_tool()
    assert norm.spec["inputSchema"]["json"]["properties"]["point"]
    with pytest.raises(ConfigurationError, match="parameter 'usage'.*TYPE_CHECKING"):
        typing_only_tools.make_unresolvable_tool()


async def test_a_turn_longer_than_the_window_is_kept_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    calls = [ToolCall("lookup", {"key": str(i)}) for i in range(5)]
    agent = Agent(
        model=ScriptedModel(["first", *calls, "done"]),
        tools=[lookup],
        conversation_manager=SlidingWindowConversationManager(window_size=10),
    )
    await agent.invoke_async("one")
    with caplog.at_level(logging.WARNING, logger="orchestra"):
        result = await agent.invoke_async("five lookups")
    assert str(result) == "done"
    assert len(agent.messages) == 12  # the whole second turn; the first one was cut
    assert agent.messages[0]["content"] == [{"text": "five lookups"}]
    assert any("window_exceeded" in r.getMessage() for r in caplog.records)
    assert_next_request_valid(agent)


async def test_the_summary_request_is_valid_on_both_providers() -> None:
    requests: list[list[dict[str, Any]]] = []

    def summarize(messages: list[dict[str, Any]], specs: Any) -> str:
        requests.append(list(messages))
        return "they looked things up"

    def reply(messages: list[dict[str, Any]], specs: Any) -> Any:
        if len(messages) > 8:
            raise ContextWindowOverflowError("too long")
        if messages[-1]["role"] == "user" and "text" in messages[-1]["content"][0]:
            return ToolCall("lookup", {"key": "k"})
        return "ok"

    agent = Agent(
        model=FunctionModel(reply),
        tools=[lookup],
        conversation_manager=SummarizingConversationManager(
            summary_ratio=0.5, preserve_recent_messages=2, summarization_model=FunctionModel(summarize)
        ),
    )
    for i in range(4):
        await agent.invoke_async(f"question {i}")
    assert requests, "the overflow was never summarized"
    for messages in requests:
        assert bedrock_problems(BEDROCK.request_body(messages, agent.tool_registry.specs())) == []
        assert openai_problems(OPENAI.request_body(messages, agent.tool_registry.specs())) == []
    assert_next_request_valid(agent)


async def test_a_session_saved_in_the_middle_of_a_turn_loads_whole_turns() -> None:
    storage = InMemoryStorage()
    manager = SnapshotSessionManager("s", storage=storage, save_latest_on="message")
    agent = await Agent.create(
        model=ScriptedModel(["hello", ToolCall("lookup", {"key": "k"})]),
        tools=[lookup],
        session_manager=manager,
    )
    await agent.invoke_async("hi")

    # Cancelled while the model thinks about the second turn (as a killed process would stop): the
    # prompt was saved, no hook ran after it.
    started = anyio.Event()

    async def hang(messages: Any, specs: Any) -> str:
        started.set()
        await anyio.sleep(10)
        return ""

    agent.model = FunctionModel(hang)
    await cut_when(started, lambda: agent.invoke_async("look"))
    # Without resume_turns, a load drops the unfinished turn: whole turns only.
    dropped = await Agent.create(
        model=ScriptedModel(["again"]),
        tools=[lookup],
        session_manager=SnapshotSessionManager("s", storage=storage),
        resume_turns=False,
    )
    assert dropped.messages == agent.messages
    assert_next_request_valid(dropped)
    # By default the open turn is kept and the next invocation finishes it: the model is asked with it.
    resumed = await Agent.create(
        model=ScriptedModel(["again"]),
        tools=[lookup],
        session_manager=SnapshotSessionManager("s", storage=storage),
    )
    assert resumed.messages == [*agent.messages, {"role": "user", "content": [{"text": "look"}]}]
    assert resumed.open_turn() == len(agent.messages)
    result = await resumed.invoke_async("look")  # the caller's retry of the same prompt
    assert result.resumed
    assert [m["content"][0]["text"] for m in resumed.messages[-2:]] == ["look", "again"]
    assert_next_request_valid(resumed)


# -- streaming protocols -------------------------------------------------------------------------------


def chat_length_cut_tool_call() -> Reply:
    chunks = [
        _chunk({"role": "assistant", "content": None}),
        _chunk(
            {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "lookup"}}]}
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"key": "unfini'}}]}),
        _chunk(finish="length"),
    ]
    return Reply(200, {"Content-Type": "text/event-stream"}, _sse(chunks))


async def test_openai_a_tool_call_cut_by_the_token_limit_is_not_run() -> None:
    with ChatCompletionsServer() as server:
        server.queue(ChatCompletionsServer.text("hello"), chat_length_cut_tool_call())
        agent = Agent(model=OpenAIModel("m", base_url=f"{server.url}/v1", api_key="k"), tools=[lookup])
        await agent.invoke_async("hi")
        result = await agent.invoke_async("look")
    assert result.stop_reason == "max_tokens"
    assert result.metrics.tool_calls == 0
    assert_next_request_valid(agent)


async def test_openai_an_error_event_in_the_stream_raises() -> None:
    chunks = [_chunk({"content": "partial ans"}), {"error": {"message": "upstream overloaded", "code": "x"}}]
    with ChatCompletionsServer() as server:
        server.queue(ChatCompletionsServer.text("hello"), Reply(200, {}, _sse(chunks)))
        agent = Agent(model=OpenAIModel("m", base_url=f"{server.url}/v1", api_key="k"))
        await agent.invoke_async("hi")
        with pytest.raises(ModelError, match="in the middle of the reply: upstream overloaded"):
            await agent.invoke_async("more")
    assert len(agent.messages) == 2
    assert_next_request_valid(agent)


async def test_bedrock_a_tool_call_cut_by_the_token_limit_is_not_run() -> None:
    events = [
        event_message("messageStart", {"role": "assistant"}),
        event_message(
            "contentBlockStart",
            {"start": {"toolUse": {"toolUseId": "t1", "name": "lookup"}}, "contentBlockIndex": 0},
        ),
        event_message("contentBlockDelta", {"delta": {"toolUse": {"input": '{"ke'}}, "contentBlockIndex": 0}),
        event_message("contentBlockStop", {"contentBlockIndex": 0}),
        event_message("messageStop", {"stopReason": "max_tokens"}),
        event_message(
            "metadata",
            {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}, "metrics": {"latencyMs": 1}},
        ),
    ]
    with ConverseServer() as server:
        server.queue(
            ConverseServer.stream("hello"),
            Reply(200, {"Content-Type": "application/vnd.amazon.eventstream"}, b"".join(events)),
        )
        agent = Agent(
            model=BedrockModel("m", region_name="us-east-1", endpoint_url=server.url), tools=[lookup]
        )
        await agent.invoke_async("hi")
        result = await agent.invoke_async("look")
    assert result.stop_reason == "max_tokens"
    assert result.metrics.tool_calls == 0
    assert_next_request_valid(agent)


async def test_openai_model_reuses_one_connection_pool_per_event_loop() -> None:
    with ChatCompletionsServer() as server:
        server.queue(*(ChatCompletionsServer.text(f"r{i}") for i in range(3)))
        model = OpenAIModel("m", base_url=f"{server.url}/v1", api_key="k")
        agent = Agent(model=model)
        for i in range(3):
            await agent.invoke_async(f"q{i}")
        assert len(model._pools) == 1
        (pool,) = model._pools.values()
        assert not pool.client.is_closed


def test_openai_model_pools_close_with_their_event_loop() -> None:
    with ChatCompletionsServer() as server:
        server.queue(ChatCompletionsServer.text("a"), ChatCompletionsServer.text("b"))
        model = OpenAIModel("m", base_url=f"{server.url}/v1", api_key="k")
        agent = Agent(model=model)
        agent("one")  # a loop of its own, closed when the call returns
        clients = [pool.client for pool in model._pools.values()]
        agent("two")  # another loop: another pool
    assert clients
    assert all(client.is_closed for client in clients)
