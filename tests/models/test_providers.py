"""Bedrock (boto3 Converse) and OpenAI-compatible providers against local servers speaking their protocols."""

import pytest
from pydantic import BaseModel

from orchestra import Agent, tool
from orchestra.conversation import SlidingWindowConversationManager
from orchestra.errors import (
    ConfigurationError,
    ContextWindowOverflowError,
    ModelAuthenticationError,
    ModelThrottledError,
)
from orchestra.models import StreamStop, TextDelta, ToolUseEvent, UsageEvent, resolve_model
from orchestra.models.bedrock import BedrockModel
from orchestra.models.openai import OpenAIModel
from orchestra.testing import collect
from tests.models.servers import ChatCompletionsServer, ConverseServer

HELLO = [{"role": "user", "content": [{"text": "hello"}]}]


@tool
def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city
    """
    return f"12C in {city}"


@pytest.fixture
def chat():
    with ChatCompletionsServer() as server:
        yield server


@pytest.fixture
def converse():
    with ConverseServer() as server:
        yield server


def openai_model(server, **options):
    return OpenAIModel("test-model", base_url=f"{server.url}/v1", api_key="sk-test", **options)


def bedrock_model(server, **options):
    return BedrockModel("anthropic.test-v1:0", region_name="us-east-1", endpoint_url=server.url, **options)


# -- OpenAI-compatible ------------------------------------------------------------------------------------


async def test_openai_streams_text_and_usage(chat):
    chat.queue(ChatCompletionsServer.text("Hel", "lo!"))
    events = await collect(openai_model(chat).stream(HELLO, system_prompt="be nice"))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo!"]
    usage = next(e for e in events if isinstance(e, UsageEvent)).usage
    assert (usage.input_tokens, usage.output_tokens) == (10, 2)
    assert events[-1] == StreamStop("end_turn")
    request = chat.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.body["stream"] is True
    assert request.body["messages"] == [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "hello"},
    ]


async def test_openai_parallel_tool_calls_and_the_tool_loop(chat):
    chat.queue(
        ChatCompletionsServer.tool_calls(
            ("call_1", "weather", {"city": "Paris"}), ("call_2", "weather", {"city": "Oslo"})
        ),
        ChatCompletionsServer.text("Paris 12C, Oslo 12C."),
    )
    agent = Agent(model=openai_model(chat), tools=[weather])
    result = await agent.invoke_async("weather in Paris and Oslo?")
    assert str(result) == "Paris 12C, Oslo 12C."
    assert [b["toolUse"]["input"] for b in agent.messages[1]["content"]] == [
        {"city": "Paris"},
        {"city": "Oslo"},
    ]
    second = chat.requests[1].body
    assert second["tools"][0]["function"]["name"] == "weather"
    assert second["messages"][1]["tool_calls"][1]["function"] == {
        "name": "weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert second["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "12C in Paris"}
    assert second["messages"][3]["tool_call_id"] == "call_2"


async def test_openai_one_tool_call(chat):
    chat.queue(ChatCompletionsServer.tool_calls(("call_9", "weather", {"city": "Rome"})))
    events = await collect(openai_model(chat).stream(HELLO))
    assert [e for e in events if isinstance(e, ToolUseEvent)] == [
        ToolUseEvent("call_9", "weather", {"city": "Rome"})
    ]
    assert events[-1] == StreamStop("tool_use")


async def test_openai_429_is_retried_after_retry_after(chat):
    chat.queue(
        ChatCompletionsServer.error(429, "slow down", retry_after="0.05"), ChatCompletionsServer.text("ok")
    )
    events = await collect(openai_model(chat).stream(HELLO))
    assert TextDelta("ok") in events
    assert len(chat.requests) == 2


async def test_openai_throttled_past_the_retries(chat):
    chat.queue(*[ChatCompletionsServer.error(429, "slow down", retry_after="0") for _ in range(3)])
    with pytest.raises(ModelThrottledError, match="still throttled"):
        await collect(openai_model(chat, max_retries=2).stream(HELLO))


async def test_openai_context_overflow_lets_the_conversation_manager_reduce(chat):
    chat.queue(
        ChatCompletionsServer.error(
            400, "This model's maximum context length is 8 tokens", code="context_length_exceeded"
        ),
        ChatCompletionsServer.text("fits now"),
    )
    history = [
        {"role": "user", "content": [{"text": "old question"}]},
        {"role": "assistant", "content": [{"text": "old answer"}]},
    ]
    agent = Agent(
        model=openai_model(chat), messages=history, conversation_manager=SlidingWindowConversationManager(10)
    )
    assert str(await agent.invoke_async("new question")) == "fits now"
    assert len(chat.requests[1].body["messages"]) < len(chat.requests[0].body["messages"])
    chat.queue(
        ChatCompletionsServer.error(400, "maximum context length exceeded", code="context_length_exceeded")
    )
    with pytest.raises(ContextWindowOverflowError):
        await collect(openai_model(chat).stream(HELLO))


async def test_openai_auth_failure_is_clear(chat):
    chat.queue(ChatCompletionsServer.error(401, "Incorrect API key provided"))
    with pytest.raises(ModelAuthenticationError, match="refused the credentials .*OPENAI_API_KEY"):
        await collect(openai_model(chat).stream(HELLO))


def test_ollama_strings_point_at_the_local_server():
    model = resolve_model("ollama:llama3.2")
    assert isinstance(model, OpenAIModel)
    assert model.base_url == "http://localhost:11434/v1"
    assert model.name == "openai:llama3.2"
    assert resolve_model("ollama:llama3.2") is model  # one instance per configuration
    assert (
        resolve_model({"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1"}).base_url
        == "http://127.0.0.1:1/v1"
    )


def test_openai_without_a_key_is_refused_at_once_naming_the_variable(monkeypatch):
    """Issue 35, item 24: not a minute of retries against a host the sandbox cannot reach."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for build in (
        lambda: OpenAIModel("gpt-4o-mini"),
        lambda: resolve_model("openai:gpt-4o-mini"),
        lambda: Agent(model="openai:gpt-4o-mini"),
        lambda: OpenAIModel("gpt-4o-mini", base_url="https://api.openai.com/v1/", api_key=""),
    ):
        with pytest.raises(
            ConfigurationError, match=r"needs an API key: set OPENAI_API_KEY \(or pass api_key="
        ):
            build()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert OpenAIModel("gpt-4o-mini").api_key == "sk-test"


def test_a_local_openai_compatible_server_needs_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert OpenAIModel("llama3.2", base_url="http://127.0.0.1:11434/v1").api_key is None
    assert resolve_model("ollama:llama3.2").name == "openai:llama3.2"


# -- Bedrock ----------------------------------------------------------------------------------------------


async def test_bedrock_streams_text_through_boto3(converse):
    converse.queue(ConverseServer.stream("Hello there!"))
    events = await collect(bedrock_model(converse).stream(HELLO, system_prompt="be nice"))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there!"
    assert next(e for e in events if isinstance(e, UsageEvent)).usage.total_tokens == 19
    assert events[-1] == StreamStop("end_turn")
    request = converse.requests[0]
    assert request.path == "/model/anthropic.test-v1%3A0/converse-stream"
    assert request.headers["Authorization"].startswith("AWS4-HMAC-SHA256")  # boto3 signed it
    assert request.body["messages"] == HELLO
    assert request.body["system"] == [{"text": "be nice"}]


async def test_bedrock_parallel_tool_calls_and_the_tool_loop(converse):
    converse.queue(
        ConverseServer.stream(
            "Checking.", ("t1", "weather", {"city": "Paris"}), ("t2", "weather", {"city": "Oslo"})
        ),
        ConverseServer.stream("Both 12C."),
    )
    agent = Agent(model=bedrock_model(converse), tools=[weather])
    assert str(await agent.invoke_async("weather?")) == "Both 12C."
    assert agent.messages[1]["content"][0] == {"text": "Checking."}
    assert [b["toolUse"]["toolUseId"] for b in agent.messages[1]["content"][1:]] == ["t1", "t2"]
    second = converse.requests[1].body
    assert second["toolConfig"]["tools"][0]["toolSpec"]["name"] == "weather"
    assert second["messages"][2]["content"][0]["toolResult"] == {
        "toolUseId": "t1",
        "status": "success",
        "content": [{"text": "12C in Paris"}],
    }


async def test_bedrock_one_tool_call(converse):
    converse.queue(ConverseServer.stream(("t9", "weather", {"city": "Rome"})))
    events = await collect(bedrock_model(converse).stream(HELLO))
    assert [e for e in events if isinstance(e, ToolUseEvent)] == [
        ToolUseEvent("t9", "weather", {"city": "Rome"})
    ]
    assert events[-1] == StreamStop("tool_use")


async def test_bedrock_converse_without_streaming(converse):
    converse.queue(ConverseServer.message("not streamed"))
    events = await collect(bedrock_model(converse, streaming=False).stream(HELLO))
    assert TextDelta("not streamed") in events
    assert converse.requests[0].path.endswith("/converse")


async def test_bedrock_throttling_is_retried_then_succeeds(converse):
    converse.queue(
        ConverseServer.error(429, "ThrottlingException", "Too many requests"), ConverseServer.stream("ok")
    )
    events = await collect(bedrock_model(converse).stream(HELLO))
    assert TextDelta("o") in events or any(isinstance(e, TextDelta) for e in events)
    assert len(converse.requests) == 2


async def test_bedrock_throttled_past_the_retries(converse):
    converse.queue(*[ConverseServer.error(429, "ThrottlingException", "Too many requests") for _ in range(2)])
    with pytest.raises(ModelThrottledError, match="still throttled"):
        await collect(bedrock_model(converse, max_attempts=2).stream(HELLO))


async def test_bedrock_context_overflow(converse):
    converse.queue(
        ConverseServer.error(400, "ValidationException", "Input is too long for requested model."),
        ConverseServer.stream("fits now"),
    )
    history = [
        {"role": "user", "content": [{"text": "old question"}]},
        {"role": "assistant", "content": [{"text": "old answer"}]},
    ]
    agent = Agent(
        model=bedrock_model(converse),
        messages=history,
        conversation_manager=SlidingWindowConversationManager(10),
    )
    assert str(await agent.invoke_async("new question")) == "fits now"
    converse.queue(ConverseServer.error(400, "ValidationException", "Input is too long for requested model."))
    with pytest.raises(ContextWindowOverflowError):
        await collect(bedrock_model(converse).stream(HELLO))


async def test_bedrock_auth_failure_and_unknown_model(converse):
    converse.queue(ConverseServer.error(403, "AccessDeniedException", "You don't have access to the model"))
    with pytest.raises(ModelAuthenticationError, match="model access is enabled"):
        await collect(bedrock_model(converse).stream(HELLO))
    converse.queue(
        ConverseServer.error(400, "ValidationException", "The provided model identifier is invalid.")
    )
    with pytest.raises(Exception, match="unknown model 'anthropic.test-v1:0'"):
        await collect(bedrock_model(converse).stream(HELLO))


def test_bedrock_client_is_built_once_and_shared(converse):
    model = resolve_model(
        {"provider": "bedrock", "model": "m1", "endpoint_url": converse.url, "region_name": "us-east-1"}
    )
    again = resolve_model(
        {"provider": "bedrock", "model": "m1", "endpoint_url": converse.url, "region_name": "us-east-1"}
    )
    assert model is again
    assert Agent(model=model).model.client is Agent(model=again).model.client


# -- structured output: the forced final tool, checked by each provider's own request types ------------


class Forecast(BaseModel):
    """A weather forecast."""

    city: str
    celsius: float


async def test_openai_structured_output_forces_the_final_tool(chat):
    chat.queue(
        ChatCompletionsServer.text("Paris, 12C."),
        ChatCompletionsServer.tool_calls(("call_1", "Forecast", {"city": "Paris", "celsius": 12})),
    )
    result = await Agent(model=openai_model(chat)).invoke_async("weather?", output_type=Forecast)
    assert result.output == Forecast(city="Paris", celsius=12)
    first, second = (r.body for r in chat.requests)
    assert "tool_choice" not in first
    assert first["tools"][0]["function"]["parameters"]["required"] == ["city", "celsius"]
    assert second["tool_choice"] == {"type": "function", "function": {"name": "Forecast"}}
    # On exit the server checks both requests with the openai package's request types.


async def test_bedrock_structured_output_forces_the_final_tool(converse):
    converse.queue(
        ConverseServer.stream("Paris, 12C."),
        ConverseServer.stream(("t1", "Forecast", {"city": "Paris", "celsius": 12})),
    )
    result = await Agent(model=bedrock_model(converse)).invoke_async("weather?", output_type=Forecast)
    assert result.output == Forecast(city="Paris", celsius=12)
    second = converse.requests[1].body
    assert second["toolConfig"]["toolChoice"] == {"tool": {"name": "Forecast"}}
    assert [t["toolSpec"]["name"] for t in second["toolConfig"]["tools"]] == ["Forecast"]
    from tests.models.provider_rules import bedrock_problems

    assert [bedrock_problems(r.body | {"modelId": "m"}) for r in converse.requests] == [[], []]
    # The oracle (botocore's Converse shape) does check the choice: a malformed one is refused.
    assert bedrock_problems(
        second | {"modelId": "m", "toolConfig": {**second["toolConfig"], "toolChoice": {"tool": {}}}}
    )
