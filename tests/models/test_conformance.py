"""The conformance suite every model provider runs (a custom provider should pass it too).

Each provider is given as a factory returning ``(model, reply_text, reply_tool)``: the two callables
script the provider's next answer (a final text, or one tool call).
"""

import copy
from contextlib import contextmanager

import pytest

from orchestra import Agent, tool
from orchestra.models import Model, ModelEvent, StreamStop, TextDelta, ToolUseEvent, UsageEvent
from orchestra.models.bedrock import BedrockModel
from orchestra.models.openai import OpenAIModel
from orchestra.testing import FunctionModel, ScriptedModel, ToolCall, collect
from tests.models.servers import ChatCompletionsServer, ConverseServer


@contextmanager
def scripted():
    model = ScriptedModel([])
    yield (
        model,
        lambda text: model.replies.append(text),
        lambda name, args: model.replies.append(ToolCall(name, args)),
    )


@contextmanager
def function():
    queue = []
    yield (
        FunctionModel(lambda messages, specs: queue.pop(0)),
        queue.append,
        lambda n, a: queue.append(ToolCall(n, a)),
    )


@contextmanager
def openai():
    with ChatCompletionsServer() as server:
        model = OpenAIModel("m", base_url=f"{server.url}/v1", api_key="k")
        yield (
            model,
            lambda text: server.queue(ChatCompletionsServer.text(text)),
            lambda name, args: server.queue(ChatCompletionsServer.tool_calls(("c1", name, args))),
        )


@contextmanager
def bedrock():
    with ConverseServer() as server:
        model = BedrockModel("m", region_name="us-east-1", endpoint_url=server.url)
        yield (
            model,
            lambda text: server.queue(ConverseServer.stream(text)),
            lambda name, args: server.queue(ConverseServer.stream(("t1", name, args))),
        )


PROVIDERS = [scripted, function, openai, bedrock]
MESSAGES = [
    {"role": "user", "content": [{"text": "hi"}]},
    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "x1", "name": "echo", "input": {"v": 1}}}]},
    {
        "role": "user",
        "content": [{"toolResult": {"toolUseId": "x1", "status": "success", "content": [{"text": "1"}]}}],
    },
]


@tool
def echo(value: str) -> str:
    """Echo a value.

    Args:
        value: what to echo
    """
    return value


def check_shape(events: list[ModelEvent]) -> None:
    assert all(isinstance(e, TextDelta | ToolUseEvent | UsageEvent | StreamStop) for e in events)
    assert isinstance(events[-1], StreamStop)
    assert sum(isinstance(e, StreamStop) for e in events) == 1
    assert sum(isinstance(e, UsageEvent) for e in events) == 1


@pytest.fixture(params=PROVIDERS, ids=lambda p: p.__name__)
def provider(request):
    with request.param() as scripted_provider:
        yield scripted_provider


def test_is_a_model(provider):
    model, _, _ = provider
    assert isinstance(model, Model)
    assert isinstance(model.name, str)
    assert model.name


async def test_text_reply(provider):
    model, reply_text, _ = provider
    reply_text("the answer")
    before = copy.deepcopy(MESSAGES)
    events = await collect(model.stream(MESSAGES, tool_specs=[echo.spec], system_prompt="sys"))
    check_shape(events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "the answer"
    assert events[-1] == StreamStop("end_turn")
    assert before == MESSAGES  # the history is never mutated


async def test_tool_call_reply(provider):
    model, _, reply_tool = provider
    reply_tool("echo", {"value": "x"})
    events = await collect(model.stream(MESSAGES, tool_specs=[echo.spec]))
    check_shape(events)
    calls = [e for e in events if isinstance(e, ToolUseEvent)]
    assert len(calls) == 1
    assert calls[0].name == "echo"
    assert calls[0].input == {"value": "x"}
    assert isinstance(calls[0].tool_use_id, str)
    assert calls[0].tool_use_id
    assert events[-1] == StreamStop("tool_use")


async def test_runs_an_agent_tool_loop(provider):
    model, reply_text, reply_tool = provider
    reply_tool("echo", {"value": "ping"})
    reply_text("done")
    agent = Agent(model=model, tools=[echo])
    result = await agent.invoke_async("call echo")
    assert str(result) == "done"
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "ping"}]
    assert result.metrics.cycles == 2
