"""Spans checked against the GenAI semantic conventions as ``opentelemetry-semantic-conventions`` names them.

Attribute names and allowed values come from that package's constants, never from strings of our own.
"""

import json
from urllib.parse import unquote

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import server_attributes as server
from opentelemetry.semconv.attributes import error_attributes as error
from opentelemetry.trace import SpanKind, StatusCode

from orchestra import Agent, tool
from orchestra.models import ScriptedModel
from orchestra.models.bedrock import BedrockModel
from orchestra.models.openai import OpenAIModel
from orchestra.models.scripted import ToolCall
from orchestra.multiagent import GraphBuilder, Swarm
from tests.models.servers import ChatCompletionsServer, ConverseServer

OPERATIONS = {v.value for v in gen_ai.GenAiOperationNameValues}
ROLES = {"system", "user", "assistant", "tool"}
PART_TYPES = {"text", "tool_call", "tool_call_response", "blob", "uri", "reasoning"}
FINISH_REASONS = {"stop", "length", "content_filter", "tool_call", "error"}


@tool
def explode(what: str) -> str:
    """Fail on purpose.

    Args:
        what: anything
    """
    raise ValueError(f"cannot {what}")


@tool
def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: first
        b: second
    """
    return a + b


def finished(spans, prefix):
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


def check_common(span):
    """What every GenAI span must carry: a known operation, a provider, a span name built from them."""
    attributes = span.attributes
    assert attributes[gen_ai.GEN_AI_OPERATION_NAME] in OPERATIONS
    assert span.name.split(" ")[0] == attributes[gen_ai.GEN_AI_OPERATION_NAME]


def test_a_tool_that_raised_marks_its_span_as_an_error_with_error_type(spans):
    agent = Agent(model=ScriptedModel([ToolCall("explode", {"what": "x"}), "sorry"]), tools=[explode])
    agent("go")
    (tool_span,) = finished(spans, "execute_tool")
    check_common(tool_span)
    assert tool_span.kind is SpanKind.INTERNAL
    assert tool_span.status.status_code is StatusCode.ERROR
    assert tool_span.attributes[error.ERROR_TYPE] == "ValueError"
    assert tool_span.attributes[gen_ai.GEN_AI_TOOL_NAME] == "explode"
    assert tool_span.attributes[gen_ai.GEN_AI_TOOL_TYPE] == "function"


def test_an_error_result_without_an_exception_is_an_error_too(spans):
    # Unknown tool: the loop answers an error result; the span says so with the conventions' fallback.
    agent = Agent(model=ScriptedModel([ToolCall("nope", {}), "ok"], allow_unknown_tools=True), tools=[add])
    agent("go")
    (tool_span,) = finished(spans, "execute_tool")
    assert tool_span.status.status_code is StatusCode.ERROR
    assert tool_span.attributes[error.ERROR_TYPE] == error.ErrorTypeValues.OTHER.value


def test_a_bedrock_chat_span_names_the_model_id_botocore_sent(spans):
    with ConverseServer() as converse:
        converse.queue(ConverseServer.stream("hello"))
        model = BedrockModel("anthropic.test-v1:0", region_name="us-east-1", endpoint_url=converse.url)
        Agent(model=model)("hi")
        sent_model_id = unquote(converse.requests[0].path.split("/")[2])
    (chat,) = finished(spans, "chat")
    check_common(chat)
    assert chat.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == sent_model_id == "anthropic.test-v1:0"
    assert chat.name == f"chat {sent_model_id}"
    assert chat.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value
    assert chat.kind is SpanKind.CLIENT
    assert chat.attributes[server.SERVER_ADDRESS] == "127.0.0.1"
    assert chat.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 12
    assert chat.attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 7
    assert list(chat.attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS]) == ["stop"]
    (agent_span,) = finished(spans, "invoke_agent")
    assert agent_span.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == "aws.bedrock"
    assert agent_span.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == sent_model_id


def test_an_openai_chat_span_is_a_client_span_of_the_openai_provider(spans):
    with ChatCompletionsServer() as chat_server:
        chat_server.queue(ChatCompletionsServer.text("hello"))
        model = OpenAIModel("gpt-test", base_url=f"{chat_server.url}/v1", api_key="k")
        Agent(model=model)("hi")
        sent = chat_server.requests[0].body["model"]
    (chat,) = finished(spans, "chat")
    check_common(chat)
    assert chat.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == sent == "gpt-test"
    assert chat.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == gen_ai.GenAiProviderNameValues.OPENAI.value
    assert chat.kind is SpanKind.CLIENT
    assert chat.attributes[server.SERVER_PORT] == int(chat_server.url.rsplit(":", 1)[1])


def test_every_span_has_a_provider_and_an_in_process_model_is_internal(spans):
    Agent(model=ScriptedModel([ToolCall("add", {"a": 1, "b": 2}), "3"]), tools=[add])("1+2?")
    for span in spans.get_finished_spans():
        check_common(span)
    for chat in finished(spans, "chat"):
        assert chat.kind is SpanKind.INTERNAL  # a scripted model runs in this process
        assert chat.attributes[gen_ai.GEN_AI_PROVIDER_NAME]


def _parts_ok(messages, output=False):
    assert isinstance(messages, list)
    for message in messages:
        assert message["role"] in ROLES
        for part in message["parts"]:
            assert part["type"] in PART_TYPES, part
            if part["type"] == "text":
                assert isinstance(part["content"], str)
            if part["type"] == "tool_call":
                assert {"id", "name", "arguments"} <= set(part)
            if part["type"] == "tool_call_response":
                assert {"id", "response"} <= set(part)
        if output:
            assert message["finish_reason"] in FINISH_REASONS


def test_contents_follow_the_conventions_role_and_parts_structure(spans, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TRACE_CONTENT", "1")
    agent = Agent(
        model=ScriptedModel([ToolCall("add", {"a": 1, "b": 2}, "t1"), "3"]),
        tools=[add],
        system_prompt="Be exact.",
    )
    agent("1+2?")
    first, second = finished(spans, "chat")
    inputs = json.loads(second.attributes[gen_ai.GEN_AI_INPUT_MESSAGES])
    _parts_ok(inputs)
    assert inputs[0] == {"role": "user", "parts": [{"type": "text", "content": "1+2?"}]}
    assert inputs[1]["parts"] == [
        {"type": "tool_call", "id": "t1", "name": "add", "arguments": {"a": 1, "b": 2}}
    ]
    assert inputs[2]["role"] == "tool"
    assert inputs[2]["parts"][0]["type"] == "tool_call_response"
    assert inputs[2]["parts"][0]["id"] == "t1"
    outputs = json.loads(first.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES])
    _parts_ok(outputs, output=True)
    assert outputs[0]["finish_reason"] == "tool_call"
    system = json.loads(first.attributes[gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS])
    assert system == [{"type": "text", "content": "Be exact."}]
    (agent_span,) = finished(spans, "invoke_agent")
    final = json.loads(agent_span.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES])
    _parts_ok(final, output=True)
    assert final[0]["parts"] == [{"type": "text", "content": "3"}]


def test_an_agent_used_as_a_tool_gets_an_invoke_agent_span_under_its_tool_call(spans):
    helper = Agent(name="helper", model=ScriptedModel(["helped"]))
    boss = Agent(name="boss", model=ScriptedModel([ToolCall("helper", {"input": "help"}), "done"]))
    boss.tool_registry.add(helper.as_tool())
    boss("go")
    tool_span = finished(spans, "execute_tool helper")[0]
    inner = finished(spans, "invoke_agent helper")[0]
    assert inner.parent.span_id == tool_span.context.span_id
    assert inner.attributes[gen_ai.GEN_AI_AGENT_NAME] == "helper"


def test_a_handoff_gives_the_receiving_agent_an_invoke_agent_span_in_the_same_trace(spans):
    first = Agent(
        name="first",
        model=ScriptedModel([ToolCall("handoff_to_agent", {"agent_name": "second", "message": "yours"})]),
    )
    second = Agent(name="second", model=ScriptedModel(["finished"]))
    Swarm([first, second])("task")
    (run,) = finished(spans, "invoke_workflow")
    check_common(run)
    handoff = finished(spans, "execute_tool handoff_to_agent")[0]
    receiving = finished(spans, "invoke_agent second")[0]
    assert receiving.context.trace_id == handoff.context.trace_id == run.context.trace_id
    assert receiving.attributes[gen_ai.GEN_AI_AGENT_NAME] == "second"


def test_a_failed_run_marks_its_workflow_and_node_spans(spans):
    def boom(task, state):
        raise RuntimeError("boom")

    graph = GraphBuilder().add_node(boom, "boom").build()
    assert graph("task").status.value == "failed"
    (run,) = finished(spans, "invoke_workflow")
    (node,) = finished(spans, "execute_node")
    for span in (run, node):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes[error.ERROR_TYPE]
    assert run.attributes[gen_ai.GEN_AI_WORKFLOW_NAME] == graph.id
