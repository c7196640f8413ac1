"""``POST /ag-ui/{agent}``: a run's events as AG-UI events, decoded with the ag-ui-protocol package's models."""

import uuid

import anyio
import httpx
import jsonpatch
import pytest
from ag_ui.core import Event, EventType, RunAgentInput, UserMessage
from ag_ui.core.types import ResumeEntry
from pydantic import TypeAdapter

from orchestra.server import hash_key
from orchestra.server.protocols.agui import state_delta
from orchestra.session import admin
from orchestra.storage import LocalFileStorage, PrefixedStorage
from tests.server.conftest import KEYS, Server, auth

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
    # The agent's state starts empty (a snapshot of {} before the tool call); the notebook writes it.
    assert kinds(events)[1:3] == [EventType.STATE_SNAPSHOT, EventType.TOOL_CALL_START]
    state, deltas = client_state(events)
    with httpx.Client(timeout=30) as http:
        stored = http.get(f"{server.url}/api/v1/agents/helper/sessions/{body.thread_id}", headers=auth())
    assert state == stored.json()["state"] != {}
    assert deltas == 1
    events = [e for e in events if e.type not in (EventType.STATE_SNAPSHOT, EventType.STATE_DELTA)]
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


def test_a_graph_s_nodes_are_steps_and_an_interrupt_outcome_that_resume_answers(server):
    body = run_input("ship v2")
    events = run(server, "approval", body)
    check_lifecycle(events, body)
    steps = [
        (e.type, e.step_name) for e in events if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)
    ]
    assert steps[:2] == [(EventType.STEP_STARTED, "draft"), (EventType.STEP_FINISHED, "draft")]
    assert steps[2:] == [(EventType.STEP_STARTED, "approve"), (EventType.STEP_FINISHED, "approve")]
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


# -- the agent's state as AG-UI's state ----------------------------------------------------------------

STAGES = """version: 1
kind: agent
id: stages
agents:
  - name: stager
    state: {stage: new, scratch: [1, 2], reviewer: ann}
    tools: ['tests.server.agents:advance']
    model:
      provider: scripted
      follow_history: true
      replies:
        - {tool: advance, input: {stage: drafting}}
        - {tool: advance, input: {stage: review, finish: true}}
        - Reviewed.
"""

SHARED = """version: 1
kind: graph
id: shared
state: {stage: new, draft: v0}
nodes:
  - {id: write, function: 'tests.server.agents:shared_stage'}
  - {id: edit, function: 'tests.server.agents:shared_stage'}
  - {id: publish, function: 'tests.server.agents:shared_stage'}
edges:
  - {from: write, to: edit}
  - {from: edit, to: publish}
"""


@pytest.fixture
def stateful(tmp_path):
    (tmp_path / "stages.yaml").write_text(STAGES)
    (tmp_path / "shared.yaml").write_text(SHARED)
    config = tmp_path / "server.yaml"
    config.write_text(
        f"""version: 1
storage: file:{tmp_path}/store
agents:
  - {{id: stages, spec: stages.yaml, workspace: acme}}
  - {{id: shared, spec: shared.yaml, workspace: acme}}
api_keys:
  - {{workspace: acme, sha256: {hash_key(KEYS["acme"])}}}
"""
    )
    with Server(config) as running:
        running.store = tmp_path / "store"
        yield running


def client_state(events):
    """What an AG-UI client holds: the snapshot, then each delta applied with jsonpatch (RFC 6902), an
    implementation this project did not write. Returns the state and how many deltas changed it."""
    state, deltas = None, 0
    for event in events:
        if event.type == EventType.STATE_SNAPSHOT:
            assert state is None, "one snapshot, then deltas"
            state = event.snapshot
        elif event.type == EventType.STATE_DELTA:
            assert state is not None, "a delta before any snapshot"
            patch = [op.model_dump(mode="json", by_alias=True) for op in event.delta]
            state = jsonpatch.apply_patch(state, patch)
            deltas += 1
    return state, deltas


def stored_run_state(store, agent_id, session_id, orchestrator_id):
    storage = PrefixedStorage(LocalFileStorage(store), f"ws/acme/agents/{agent_id}")
    doc = anyio.run(admin.load_scope, storage, session_id, "multiAgent", orchestrator_id)
    return doc.fields["state"]


def test_the_agents_state_is_the_clients_state_a_snapshot_then_deltas(stateful):
    body = run_input("draft it, then review it")
    events = run(stateful, "stages", body)  # every event decoded by the package's own models
    check_lifecycle(events, body)
    first = next(e for e in events if e.type == EventType.STATE_SNAPSHOT)
    assert first.snapshot == {"stage": "new", "scratch": [1, 2], "reviewer": "ann"}  # as the run starts
    assert kinds(events).index(EventType.STATE_SNAPSHOT) == 1  # right after RUN_STARTED

    state, deltas = client_state(events)
    assert deltas == 2  # one per tool call that changed it
    with httpx.Client(timeout=30) as http:
        stored = http.get(f"{stateful.url}/api/v1/agents/stages/sessions/{body.thread_id}", headers=auth())
    assert stored.json()["state"] == state  # the agent's final state, as its session kept it
    assert state["stage"] == "review"
    assert "scratch" not in state
    assert state["reviewer"] is None
    assert state["a/b~c"] == {"escaped": True}
    # The stage is in the state before the tool's result reaches the client.
    order = kinds(events)
    first_delta = order.index(EventType.STATE_DELTA)
    assert first_delta < order.index(EventType.TOOL_CALL_RESULT)

    # The next run on the thread starts from where the last one left the state.
    again = run(stateful, "stages", run_input("and again", thread_id=body.thread_id))
    assert next(e for e in again if e.type == EventType.STATE_SNAPSHOT).snapshot == state


def test_a_pipelines_shared_state_is_the_clients_state(stateful):
    body = run_input("write, edit, publish")
    events = run(stateful, "shared", body)
    check_lifecycle(events, body)
    assert events[-1].outcome.type == "success"
    state, deltas = client_state(events)
    assert deltas >= 3  # each node changed it
    assert state == stored_run_state(stateful.store, "shared", body.thread_id, "shared")
    assert state == {"stage": "publish", "done": ["write", "edit", "publish"]}
    steps = [e.step_name for e in events if e.type == EventType.STEP_FINISHED]
    assert steps == ["write", "edit", "publish"]


def test_state_deltas_are_json_patches_any_implementation_applies():
    before = {"keep": 1, "gone": [1], "changed": {"a": 1}, "flag": 1, "~/": "x"}
    after = {"keep": 1, "changed": {"a": 2}, "flag": True, "~/": "y", "new": None}
    delta = state_delta(before, after)
    assert jsonpatch.apply_patch(before, delta) == after
    assert {op["op"] for op in delta} == {"remove", "replace", "add"}
    assert state_delta(after, after) == []
