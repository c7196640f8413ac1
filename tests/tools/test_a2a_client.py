"""Remote A2A agents as tools, against a server built with the official a2a-sdk (real HTTP, uvicorn)."""

import socket
import threading
import time

import pytest
import uvicorn
from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Task, TaskState, TaskStatus
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from orchestra import Agent
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.multiagent import GraphBuilder, Status
from orchestra.tools.a2a import A2AClient, a2a_tool

pytestmark = pytest.mark.timeout(120)


class Echo(AgentExecutor):
    """Echoes; "ask" makes it ask a question first (input-required), which the next message answers."""

    def __init__(self):
        self.headers = []

    async def execute(self, context, event_queue):
        self.headers.append(dict(context.call_context.state.get("headers") or {}))
        task = context.current_task
        if task is None:
            task = Task(
                id=context.task_id,
                context_id=context.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message],
            )
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([new_text_part(f"answered: {text}")])
            await updater.complete()
        elif text == "ask":
            await updater.requires_input(updater.new_agent_message([new_text_part("which colour?")]))
        else:
            await updater.add_artifact([new_text_part(f"remote echo: {text} ({context.context_id[:4]})")])
            await updater.complete()

    async def cancel(self, context, event_queue):
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@pytest.fixture
def remote():
    """The SDK's own server: its request handler, task store, JSON-RPC and card routes, on uvicorn."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    url = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="echoer",
        description="Echoes what it is told.",
        version="1",
        supported_interfaces=[
            AgentInterface(url=f"{url}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echo.", tags=["echo"])],
    )
    executor = Echo()
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the A2A server did not start"
        time.sleep(0.02)
    yield url, executor
    server.should_exit = True
    thread.join(10)


async def test_an_agent_calls_a_remote_a2a_agent_as_a_tool(remote):
    url, _ = remote
    tool = a2a_tool(url)
    assert tool.name == "echoer"
    assert tool.spec["description"] == "Echoes what it is told."
    agent = Agent(
        model=ScriptedModel(
            [ToolCall("echoer", {"input": "hi"}), ToolCall("echoer", {"input": "more"}), "ok"]
        ),
        tools=[tool],
    )
    await agent.invoke_async("ask the echoer twice")
    first = agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    second = agent.messages[4]["content"][0]["toolResult"]["content"][0]["text"]
    assert first.startswith("remote echo: hi (")
    assert second.startswith("remote echo: more (")
    assert first[-6:] == second[-6:]  # the same A2A context: the conversation goes on


async def test_input_required_is_answered_by_the_next_call(remote):
    url, _ = remote
    agent = Agent(
        model=ScriptedModel(
            [ToolCall("echoer", {"input": "ask"}), ToolCall("echoer", {"input": "blue"}), "ok"]
        ),
        tools=[a2a_tool(url)],
    )
    await agent.invoke_async("go")
    asked = agent.messages[2]["content"][0]["toolResult"]
    assert asked["status"] == "success"
    assert "which colour?" in asked["content"][0]["text"]
    assert agent.messages[4]["content"][0]["toolResult"]["content"][0]["text"] == "answered: blue"


async def test_a_graph_node_calls_it_and_the_trace_goes_across(remote, spans):
    url, executor = remote
    node = Agent(
        name="asker",
        model=ScriptedModel([ToolCall("echoer", {"input": "hi"}), "done"]),
        tools=[a2a_tool(url)],
    )
    graph = GraphBuilder().add_node(node, "asker").build()
    assert (await graph.invoke_async("go")).status == Status.COMPLETED
    (client_span,) = [s for s in spans.get_finished_spans() if s.name == "invoke_agent echoer"]
    assert client_span.kind.name == "CLIENT"
    traceparent = executor.headers[-1]["traceparent"]
    assert traceparent.split("-")[1] == format(client_span.context.trace_id, "032x")
    assert traceparent.split("-")[2] == format(client_span.context.span_id, "016x")


def test_a_refused_card_says_to_pass_headers():
    def refuse(request):
        return JSONResponse({"error": "unauthorized"}, status_code=401)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    from starlette.routing import Route

    app = Starlette(routes=[Route("/{path:path}", refuse)])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        with pytest.raises(ConnectionError, match=r"401.*headers="):
            A2AClient(f"http://127.0.0.1:{port}").card()
    finally:
        server.should_exit = True
        thread.join(10)


async def test_send_gives_the_reply_and_the_ids_to_go_on_with(remote):
    url, _ = remote
    client = A2AClient(url)
    reply = await client.send("direct")
    assert reply.state == "completed"
    assert reply.text == f"remote echo: direct ({reply.context_id[:4]})"
    again = await client.send("again", context_id=reply.context_id)
    assert again.context_id == reply.context_id
    assert again.task_id != reply.task_id
