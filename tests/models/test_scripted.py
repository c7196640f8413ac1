import time

import pytest

from orchestra import Agent
from orchestra.errors import ModelNotConfiguredError, ScriptExhaustedError
from orchestra.models import StreamStop, TextDelta, ToolUseEvent, UsageEvent, resolve_model
from orchestra.testing import FunctionModel, ScriptedModel, ToolCall, collect


async def test_scripted_model_streams_text_usage_and_stop():
    model = ScriptedModel(["hello there"])
    events = await collect(model.stream([{"role": "user", "content": [{"text": "hi"}]}]))
    assert events[0] == TextDelta("hello there")
    assert isinstance(events[1], UsageEvent)
    assert events[1].usage.output_tokens > 0
    assert events[-1] == StreamStop("end_turn")


async def test_scripted_tool_calls_parallel_in_one_turn():
    model = ScriptedModel([[ToolCall("a", {"x": 1}), ToolCall("b")]])
    specs = [{"name": n, "description": n, "inputSchema": {"json": {"type": "object"}}} for n in "ab"]
    events = await collect(model.stream([], tool_specs=specs))
    tool_events = [e for e in events if isinstance(e, ToolUseEvent)]
    assert [(e.name, e.input) for e in tool_events] == [("a", {"x": 1}), ("b", {})]
    assert len({e.tool_use_id for e in tool_events}) == 2
    assert events[-1] == StreamStop("tool_use")


async def test_running_out_of_replies_names_the_model():
    model = ScriptedModel(["one"], name="writer-model")
    await collect(model.stream([]))
    with pytest.raises(ScriptExhaustedError, match=r"'writer-model' has no reply left.*1 replies.*call 2"):
        await collect(model.stream([]))


async def test_requests_are_recorded():
    model = ScriptedModel(["ok"])
    agent = Agent(model=model, system_prompt="be brief")
    await agent.invoke_async("hi")
    assert len(model.requests) == 1
    assert model.requests[0].system_prompt == "be brief"
    assert model.requests[0].last_text == "hi"


async def test_function_model_sync_and_async():
    def sync_fn(messages, tool_specs):
        return f"{len(messages)} messages, {len(tool_specs)} tools"

    async def async_fn(messages, tool_specs):
        return ToolCall("t") if len(messages) == 1 else "done"

    assert str(await Agent(model=FunctionModel(sync_fn)).invoke_async("x")) == "1 messages, 0 tools"
    from orchestra import tool

    @tool
    def t() -> str:
        """A tool."""
        return "r"

    model = FunctionModel(async_fn)
    result = await Agent(model=model, tools=[t]).invoke_async("x")
    assert str(result) == "done"
    assert len(model.requests) == 2


async def test_latency_is_applied():
    model = ScriptedModel(["a"], latency=0.05)
    started = time.perf_counter()
    await collect(model.stream([]))
    assert time.perf_counter() - started >= 0.05


def test_agent_without_model_fails_at_first_call_with_instructions(monkeypatch):
    monkeypatch.delenv("ORCHESTRA_MODEL", raising=False)
    agent = Agent(name="lonely")
    with pytest.raises(ModelNotConfiguredError, match=r"'lonely' has no model.*ORCHESTRA_MODEL"):
        agent("hi")


def test_agent_uses_orchestra_model_variable(monkeypatch):
    monkeypatch.setenv("ORCHESTRA_MODEL", "echo")
    assert str(Agent()("ping")) == "echo: ping"


def test_model_strings():
    assert resolve_model("scripted").name == "scripted"
    scripted = resolve_model({"provider": "scripted", "replies": ["x"]})
    assert isinstance(scripted, ScriptedModel)
    assert scripted.replies == ["x"]
    with pytest.raises(ValueError, match="unknown model 'gpt4'"):
        resolve_model("gpt4")
    with pytest.raises(ValueError, match="names no model"):
        resolve_model("openai:")
    fn_model = resolve_model("function:tests.support:reply_fn")
    assert isinstance(fn_model, FunctionModel)
