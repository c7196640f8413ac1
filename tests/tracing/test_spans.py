"""OpenTelemetry spans (GenAI semantic conventions), read back with the SDK's in-memory exporter."""

import os
import subprocess
import sys

import anyio
import pytest
from pydantic import BaseModel

from orchestra import Agent, tool
from orchestra.errors import ScriptExhaustedError
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.multiagent import GraphBuilder


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: first
        b: second
    """
    return a + b


def by_name(spans):
    return {span.name: span for span in spans.get_finished_spans()}


def test_an_agent_turn_gives_invoke_agent_chat_and_execute_tool(spans, monkeypatch):
    monkeypatch.delenv("ORCHESTRA_TRACE_CONTENT", raising=False)
    agent = Agent(name="calc", model=ScriptedModel([ToolCall("add", {"a": 1, "b": 2}), "3"]), tools=[add])
    agent("1+2?")
    found = by_name(spans)
    root = found["invoke_agent calc"]
    tool_span = found["execute_tool add"]
    chats = [s for s in spans.get_finished_spans() if s.name == "chat scripted"]
    assert len(chats) == 2
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.usage.input_tokens"] == sum(
        c.attributes["gen_ai.usage.input_tokens"] for c in chats
    )
    assert all(c.parent.span_id == root.context.span_id for c in chats)
    assert tool_span.parent.span_id == root.context.span_id
    assert tool_span.attributes["gen_ai.tool.name"] == "add"
    assert tool_span.attributes["orchestra.tool.status"] == "success"
    # No message contents without ORCHESTRA_TRACE_CONTENT=1.
    assert not any(
        k.startswith("gen_ai.input") or "arguments" in k
        for s in spans.get_finished_spans()
        for k in s.attributes
    )


def test_contents_only_with_the_variable(spans, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TRACE_CONTENT", "1")
    Agent(name="calc", model=ScriptedModel([ToolCall("add", {"a": 1, "b": 2}), "3"]), tools=[add])("1+2?")
    found = by_name(spans)
    assert found["execute_tool add"].attributes["gen_ai.tool.call.arguments"] == '{"a": 1, "b": 2}'
    chats = [s for s in spans.get_finished_spans() if s.name == "chat scripted"]
    assert "1+2?" in chats[0].attributes["gen_ai.input.messages"]
    assert "tool_call_response" in chats[1].attributes["gen_ai.input.messages"]


def test_a_failed_model_call_marks_the_spans(spans):
    agent = Agent(name="broken", model=ScriptedModel([]))
    with pytest.raises(ScriptExhaustedError):
        agent("hi")
    found = by_name(spans)
    assert found["invoke_agent broken"].attributes["error.type"] == "ScriptExhaustedError"
    assert found["invoke_agent broken"].status.is_ok is False


def test_orchestrator_nodes_nest_under_the_run_even_in_parallel(spans):
    def agent(name):
        return Agent(name=name, model=ScriptedModel([f"{name} done"], latency=0.01))

    inner = GraphBuilder().set_graph_id("inner")
    inner.add_node(agent("deep"), "deep")
    builder = GraphBuilder().set_graph_id("outer")
    builder.add_node(agent("start"), "start")
    builder.add_node(agent("left"), "left")
    builder.add_node(agent("right"), "right")
    builder.add_node(inner.build(), "nested")
    for branch in ("left", "right", "nested"):
        builder.add_edge("start", branch)
    result = builder.build()("go")
    assert result.status.value == "completed"
    found = by_name(spans)
    run = found["invoke_workflow outer"]
    assert run.attributes["orchestra.run.status"] == "completed"
    assert run.attributes["orchestra.run.resumed"] is False
    for node in ("start", "left", "right", "nested"):
        span = found[f"execute_node {node}"]
        assert span.parent.span_id == run.context.span_id, node
        assert span.attributes["orchestra.node.status"] == "completed"
        assert span.attributes["orchestra.node.attempt"] == 1
    # Parallel branches each carry their own agent span under their node.
    assert found["invoke_agent left"].parent.span_id == found["execute_node left"].context.span_id
    assert found["invoke_agent right"].parent.span_id == found["execute_node right"].context.span_id
    # A nested orchestrator's run sits under its node, and its nodes under it.
    assert found["invoke_workflow inner"].parent.span_id == found["execute_node nested"].context.span_id
    assert found["execute_node deep"].parent.span_id == found["invoke_workflow inner"].context.span_id


def test_structured_output_and_agents_as_tools_nest(spans):
    class Answer(BaseModel):
        value: int

    helper = Agent(name="helper", description="Adds.", model=ScriptedModel(["42"]))
    boss = Agent(
        name="boss",
        model=ScriptedModel([ToolCall("helper", {"input": "what?"}), ToolCall("Answer", {"value": 42})]),
        tools=[helper.as_tool()],
    )
    assert boss("ask", output_type=Answer).output.value == 42
    found = by_name(spans)
    assert found["invoke_agent helper"].parent.span_id == found["execute_tool helper"].context.span_id
    assert found["execute_tool Answer"].parent.span_id == found["invoke_agent boss"].context.span_id


def test_without_the_extra_nothing_is_imported_and_agents_still_run():
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the [otel] extra were not installed\n"
        "from orchestra import Agent, tracing\n"
        "assert not tracing.enabled()\n"
        "print(Agent(model='scripted')('hi').text)\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.')]\n"
    )
    env = {**os.environ, "ORCHESTRA_MODEL": "scripted"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr


def test_spans_do_not_leak_between_concurrent_agents(spans):
    async def main():
        agents = [Agent(name=f"a{i}", model=ScriptedModel(["ok"], latency=0.01)) for i in range(5)]
        async with anyio.create_task_group() as group:
            for agent in agents:
                group.start_soon(agent.invoke_async, "go")

    anyio.run(main)
    roots = [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert len(roots) == 5
    assert all(s.parent is None for s in roots)


async def test_the_server_continues_an_incoming_traceparent(spans, tmp_path):
    """Over real HTTP: the invocation's span joins the caller's trace and names the run and session."""
    import httpx

    from orchestra.server import hash_key
    from tests.server.conftest import Server

    (tmp_path / "chat.yaml").write_text(
        "version: 1\nkind: agent\nid: chat\nagents:\n  - {name: chat, model: echo}\n"
    )
    config = tmp_path / "server.yaml"
    config.write_text(
        f"version: 1\nstorage: file:{tmp_path}/store\nagents:\n  - {{id: chat, spec: chat.yaml, workspace: w}}\n"
        f"api_keys:\n  - {{workspace: w, sha256: {hash_key('k')}}}\n"
    )
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"Authorization": "Bearer k", "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    with Server(config) as running:
        async with httpx.AsyncClient(base_url=running.url, headers=headers) as http:
            answer = await http.post("/api/v1/agents/chat/invoke", json={"input": "hi", "session_id": "s1"})
            assert answer.status_code == 200, answer.text
            streamed = await http.post("/api/v1/agents/chat/invoke?stream=true", json={"input": "again"})
            assert "event: result" in streamed.text
    found = [s for s in spans.get_finished_spans() if s.name == "invoke chat"]
    assert len(found) == 2
    first = found[0]
    assert format(first.context.trace_id, "032x") == trace_id
    assert first.parent.span_id == 0x00F067AA0BA902B7
    assert first.attributes["orchestra.run.id"] == answer.json()["run_id"]
    assert first.attributes["orchestra.session.id"] == "s1"
    agent = next(s for s in spans.get_finished_spans() if s.name == "invoke_agent chat")
    assert agent.parent.span_id == first.context.span_id
