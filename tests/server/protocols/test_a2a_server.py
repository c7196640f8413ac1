"""``orchestra serve`` as A2A agents, driven by the official a2a-sdk's own client over real HTTP."""

import contextlib
import json
import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers import get_artifact_text, get_data_parts, get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)

from orchestra import Agent
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.tools.a2a import a2a_tool
from tests.server.conftest import KEYS, Server, auth, write_config

pytestmark = pytest.mark.timeout(120)

CHATTY = """version: 1
kind: agent
id: chatty
agents:
  - name: chatty
    model: {provider: scripted, replies: [[one, " two", " three", " four"]]}
"""

SLOW = """version: 1
kind: agent
id: slow
agents:
  - name: slow
    model: {provider: scripted, latency: 30, replies: [late]}
"""


@pytest.fixture
def a2a_server(tmp_path):
    config = write_config(tmp_path, f"file:{tmp_path}/store")
    (tmp_path / "slow.yaml").write_text(SLOW)
    (tmp_path / "chatty.yaml").write_text(CHATTY)
    text = config.read_text().replace(
        "api_keys:",
        "  - {id: slow, spec: slow.yaml, workspace: acme}\n"
        "  - {id: chatty, spec: chatty.yaml, workspace: acme}\napi_keys:",
    )
    config.write_text(text)
    with Server(config) as running:
        yield running


@contextlib.asynccontextmanager
async def client_for(server, agent_id, *, streaming=False, workspace="acme"):
    """The SDK's client for one hosted agent, from its card (resolved with the SDK's resolver)."""
    async with httpx.AsyncClient(headers=auth(workspace), timeout=60) as http:
        card = await A2ACardResolver(http, f"{server.url}/a2a/{agent_id}").get_agent_card()
        client = await create_client(card, ClientConfig(httpx_client=http, streaming=streaming))
        async with client:
            yield client, card


def message(text=None, *, context_id="", task_id="", data=None):
    parts = []
    if text is not None:
        parts.append(Part(text=text))
    if data is not None:
        from google.protobuf import struct_pb2

        value = struct_pb2.Value()
        value.struct_value.update(data)
        parts.append(Part(data=value))
    return Message(
        role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=parts, context_id=context_id, task_id=task_id
    )


async def send(client, msg, **configuration):
    request = SendMessageRequest(message=msg)
    if configuration:
        request.configuration.CopyFrom(SendMessageConfiguration(**configuration))
    return [event async for event in client.send_message(request)]


async def test_each_hosted_agent_publishes_a_card(a2a_server):
    async with client_for(a2a_server, "chat") as (_, card):
        pass
    assert card.name == "chat"
    assert card.description == "An echoing chat agent"
    assert card.capabilities.streaming is True
    assert card.supported_interfaces[0].url == f"{a2a_server.url}/a2a/chat/"
    assert "bearer" in card.security_schemes


async def test_message_send_answers_and_a_context_is_a_session(a2a_server):
    async with client_for(a2a_server, "chat") as (client, _):
        (first,) = await send(client, message("hello"))
        task = first.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert get_artifact_text(task.artifacts[0]) == "echo: hello (turn 1)"
        (second,) = await send(client, message("again", context_id=task.context_id))
    assert get_artifact_text(second.task.artifacts[0]) == "echo: again (turn 2)"  # the same session
    # The orchestra session is the A2A context.
    async with httpx.AsyncClient(headers=auth()) as http:
        session = (await http.get(f"{a2a_server.url}/api/v1/agents/chat/sessions/{task.context_id}")).json()
    assert len(session["messages"]) == 4


async def test_message_stream_sends_updates_then_the_final_task(a2a_server):
    async with client_for(a2a_server, "chat", streaming=True) as (client, _):
        events = await send(client, message("streamed"))
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert TaskState.TASK_STATE_WORKING in states
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert get_artifact_text(artifacts[-1]) == "echo: streamed (turn 1)"


async def test_an_interrupt_is_input_required_and_the_next_message_answers_it(a2a_server):
    async with client_for(a2a_server, "approval") as (client, _):
        (asked,) = await send(client, message("ship v2"))
        task = asked.task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "ship it?" in get_message_text(task.status.message)
        (interrupts,) = get_data_parts(list(task.status.message.parts))
        assert interrupts["interrupts"][0]["name"] == "approve"
        (answered,) = await send(client, message("yes", context_id=task.context_id, task_id=task.id))
    assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(answered.task.artifacts[0]) == "human said yes"


async def test_an_answer_can_name_its_interrupt_in_a_data_part(a2a_server):
    async with client_for(a2a_server, "approval") as (client, _):
        (asked,) = await send(client, message("ship v2"))
        task = asked.task
        interrupt_id = get_data_parts(list(task.status.message.parts))[0]["interrupts"][0]["id"]
        answer = message(context_id=task.context_id, task_id=task.id, data={"answers": {interrupt_id: "no"}})
        (answered,) = await send(client, answer)
    assert get_artifact_text(answered.task.artifacts[0]) == "human said no"


async def test_tasks_can_be_fetched_and_cancelled(a2a_server):
    async with client_for(a2a_server, "chat") as (client, _):
        (done,) = await send(client, message("keep me"))
        fetched = await client.get_task(GetTaskRequest(id=done.task.id))
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(fetched.artifacts[0]) == "echo: keep me (turn 1)"

    async with client_for(a2a_server, "slow") as (slow, _):
        (started,) = await send(slow, message("take your time"), return_immediately=True)
        assert started.task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        cancelled = await slow.cancel_task(CancelTaskRequest(id=started.task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        again = await slow.get_task(GetTaskRequest(id=started.task.id))
    assert again.status.state == TaskState.TASK_STATE_CANCELED


def test_keys_and_workspaces_hold(a2a_server):
    with httpx.Client() as http:
        anonymous = http.get(f"{a2a_server.url}/a2a/chat/.well-known/agent-card.json")
        other = http.get(
            f"{a2a_server.url}/a2a/chat/.well-known/agent-card.json",
            headers={"Authorization": f"Bearer {KEYS['globex']}"},
        )
    assert anonymous.status_code == 401
    assert other.status_code == 404  # another workspace's agent does not exist for globex


def test_the_v0_3_method_names_are_answered(a2a_server):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": "old client"}],
            }
        },
    }
    with httpx.Client(headers=auth(), timeout=60) as http:
        answer = http.post(f"{a2a_server.url}/a2a/chat/", json=body).json()
    assert answer["result"]["status"]["state"] == "completed"
    assert "echo: old client" in str(answer["result"]["artifacts"])


async def test_a_failed_run_is_a_failed_task_that_says_why(a2a_server):
    async with client_for(a2a_server, "chat") as (client, _):
        (failed,) = await send(client, message("EXPLODE"))
    assert failed.task.status.state == TaskState.TASK_STATE_FAILED
    assert "the custom model's backend exploded" in get_message_text(failed.task.status.message) or (
        "RuntimeError" in get_message_text(failed.task.status.message)
    )


async def test_our_own_a2a_tool_calls_a_hosted_pipeline(a2a_server):
    tool = a2a_tool(f"{a2a_server.url}/a2a/approval", headers=auth())
    agent = Agent(
        model=ScriptedModel(
            [ToolCall("approval", {"input": "ship"}), ToolCall("approval", {"input": "yes"}), "ok"]
        ),
        tools=[tool],
    )
    await agent.invoke_async("get it approved")
    asked = agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    assert "ship it?" in asked
    assert agent.messages[4]["content"][0]["toolResult"]["content"][0]["text"] == "human said yes"


async def test_the_server_continues_the_caller_s_trace(a2a_server, spans):
    tool = a2a_tool(f"{a2a_server.url}/a2a/chat", headers=auth())
    agent = Agent(model=ScriptedModel([ToolCall("chat", {"input": "traced"}), "ok"]), tools=[tool])
    await agent.invoke_async("go")
    finished = spans.get_finished_spans()
    (client_span,) = [s for s in finished if s.name == "invoke_agent chat" and s.kind.name == "CLIENT"]
    (served,) = [s for s in finished if s.name == "invoke chat"]
    assert served.context.trace_id == client_span.context.trace_id
    assert served.parent.span_id == client_span.context.span_id


async def test_a_streamed_reply_writes_its_task_once_per_state_not_per_delta(a2a_server, monkeypatch):
    from orchestra.storage import PrefixedStorage

    task_writes = []
    write = PrefixedStorage.write

    async def counted(self, key, data, **options):
        if "/tasks/" in key:
            task_writes.append(json.loads(data)["status"]["state"])
        return await write(self, key, data, **options)

    monkeypatch.setattr(PrefixedStorage, "write", counted)
    async with client_for(a2a_server, "chatty", streaming=True) as (client, _):
        events = await send(client, message("talk"))
    working = [
        e
        for e in events
        if e.HasField("status_update") and e.status_update.status.state == TaskState.TASK_STATE_WORKING
    ]
    assert len(working) == 5  # the start, then each of the four text deltas
    assert task_writes.count("TASK_STATE_WORKING") == 1
    assert task_writes[-1] == "TASK_STATE_COMPLETED"
