"""``POST /ag-ui/{agent}``: a run's events as AG-UI events, decoded with the ag-ui-protocol package's models."""

import uuid

import httpx
import pytest
from ag_ui.core import Event, EventType, RunAgentInput, UserMessage
from ag_ui.core.types import ResumeEntry
from pydantic import TypeAdapter

from tests.server.conftest import auth

pytestmark = pytest.mark.timeout(120)
EVENTS = TypeAdapter(Event)


def run_input(text=None, *, thread_id=None, resume=None):
    messages = [UserMessage(id=str(uuid.uuid4()), content=text)] if text is not None else []
    return RunAgentInput(
        thread_id=thread_id or f"thread-{uuid.uuid4().hex[:8]}",
        run_id=str(uuid.uuid4()),
        messages=messages,
        tools=[],
        context=[],
        state={},
        resume=resume,
    )


def run(server, agent_id, body, workspace="acme"):
    """POST the run and decode every server-sent event with the package's own discriminated union."""
    payload = body.model_dump_json(by_alias=True, exclude_none=True)
    headers = {**auth(workspace), "Content-Type": "application/json", "Accept": "text/event-stream"}
    with httpx.Client(timeout=60) as http:
        response = http.post(f"{server.url}/ag-ui/{agent_id}", content=payload, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for chunk in response.text.split("\n\n"):
        if chunk.strip():
            assert chunk.startswith("data: ")
            events.append(EVENTS.validate_json(chunk[len("data: ") :]))
    return events


def kinds(events):
    return [e.type for e in events]


def check_lifecycle(events, body):
    assert events[0].type == EventType.RUN_STARTED
    assert events[0].thread_id == body.thread_id
    assert events[0].run_id == body.run_id
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    # Text messages open, stream and close in order; tool calls too.
    open_messages, open_calls = set(), set()
    for event in events:
        if event.type == EventType.TEXT_MESSAGE_START:
            open_messages.add(event.message_id)
        elif event.type == EventType.TEXT_MESSAGE_CONTENT:
            assert event.message_id in open_messages
        elif event.type == EventType.TEXT_MESSAGE_END:
            open_messages.remove(event.message_id)
        elif event.type == EventType.TOOL_CALL_START:
            open_calls.add(event.tool_call_id)
        elif event.type in (EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END):
            assert event.tool_call_id in open_calls
    assert not open_messages


def final_state(events):
    """The state a client holds: the first snapshot with every delta applied, until the next snapshot."""
    state = None
    for event in events:
        if event.type == EventType.STATE_SNAPSHOT:
            state = dict(event.snapshot)
            state["nodes"] = dict(state["nodes"])
        elif event.type == EventType.STATE_DELTA:
            for op in event.delta:
                assert op.op in ("add", "replace")
                _, key, node = op.path.split("/")
                state[key][node] = op.value
    return state


def test_an_agent_s_text_streams_as_text_messages(server):
    body = run_input("hello")
    events = run(server, "chat", body)
    check_lifecycle(events, body)
    text = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text == "echo: hello (turn 1)"
    assert events[-1].type == EventType.RUN_FINISHED
    assert events[-1].result == "echo: hello (turn 1)"
    assert events[-1].outcome.type == "success"
    # The thread is a session: the next run goes on from it.
    again = run(server, "chat", run_input("again", thread_id=body.thread_id))
    assert again[-1].result == "echo: again (turn 2)"


def test_tool_calls_and_results(server):
    body = run_input("remember to buy milk")
    events = run(server, "helper", body)
    check_lifecycle(events, body)
    order = kinds(events)
    start = order.index(EventType.TOOL_CALL_START)
    assert order[start : start + 4] == [
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
        EventType.TOOL_CALL_RESULT,
    ]
    assert events[start].tool_call_name == "notebook"
    assert '"mode": "create"' in events[start + 1].delta
    assert events[start + 3].tool_call_id == events[start].tool_call_id


def test_a_graph_s_nodes_are_steps_with_state_deltas_and_an_interrupt_outcome_that_resume_answers(server):
    body = run_input("ship v2")
    events = run(server, "approval", body)
    check_lifecycle(events, body)
    steps = [
        (e.type, e.step_name) for e in events if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)
    ]
    assert steps[:2] == [(EventType.STEP_STARTED, "draft"), (EventType.STEP_FINISHED, "draft")]
    assert final_state(events)["nodes"] == {"draft": "completed", "approve": "interrupted"}
    assert final_state(events)["status"] == "interrupted"
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED
    assert finished.outcome.type == "interrupt"
    (interrupt,) = finished.outcome.interrupts
    assert interrupt.reason == "approve"
    assert interrupt.message == "ship it?"

    resumed_body = run_input(
        thread_id=body.thread_id,
        resume=[ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload="yes")],
    )
    resumed = run(server, "approval", resumed_body)
    check_lifecycle(resumed, resumed_body)
    assert resumed[-1].outcome.type == "success"
    assert resumed[-1].result == "human said yes"


def test_a_failed_run_ends_with_run_error(server):
    body = run_input("EXPLODE")
    events = run(server, "chat", body)
    check_lifecycle(events, body)
    assert events[-1].type == EventType.RUN_ERROR
    assert events[-1].code == "run_failed"


def test_keys_workspaces_and_bad_bodies_are_refused(server):
    payload = run_input("hi").model_dump_json(by_alias=True, exclude_none=True)
    with httpx.Client(timeout=30) as http:
        anonymous = http.post(f"{server.url}/ag-ui/chat", content=payload)
        other = http.post(f"{server.url}/ag-ui/chat", content=payload, headers=auth("globex"))
        bad = http.post(f"{server.url}/ag-ui/chat", content=b'{"threadId": "t"}', headers=auth())
    assert anonymous.status_code == 401
    assert other.status_code == 404
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_request"
