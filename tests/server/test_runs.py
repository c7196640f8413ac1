"""Background runs, their event streams, cancel and resume, and interrupts answered over HTTP, against a
real uvicorn server in this process (the multi-process proofs are in test_platform_processes.py)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from orchestra.testing import FaultyStorage
from tests.server.conftest import auth

RUNS = "/api/v1/agents/{}/runs"


def post(server, path: str, body: dict | None = None, **kwargs) -> httpx.Response:
    return httpx.post(
        f"{server.url}{path}", json=body, headers={**auth(), **kwargs.pop("headers", {})}, timeout=30
    )


def get(server, path: str, **kwargs) -> httpx.Response:
    return httpx.get(
        f"{server.url}{path}", headers={**auth(), **kwargs.pop("headers", {})}, timeout=30, **kwargs
    )


def wait_final(server, run_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = get(server, f"/api/v1/runs/{run_id}").json()
        if record["status"] not in ("queued", "executing"):
            return record
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end: {record}")


def events(server, run_id: str, last_event_id: str | None = None) -> list[tuple[str | None, str, dict]]:
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    parsed = []
    with httpx.stream(
        "GET", f"{server.url}/api/v1/runs/{run_id}/stream", headers={**auth(), **headers}, timeout=30
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        event_id, name = None, None
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                parsed.append((event_id, name, json.loads(line[6:])))
                event_id = name = None
    return parsed


def test_a_background_run_is_accepted_followed_and_replayed(platform):
    accepted = post(platform, RUNS.format("steps"), {"input": "write", "session_id": "bg"})
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["run_id"]
    assert accepted.json()["status"] in ("queued", "executing")
    record = wait_final(platform, run_id)
    assert record["status"] == "completed"
    assert record["background"] is True
    everything = events(platform, run_id)
    ids = [int(i) for i, _, _ in everything]
    assert ids == list(range(1, len(ids) + 1))  # every event once, in order, numbered from 1
    names = [name for _, name, _ in everything]
    assert names[:2] == ["status", "status"]  # queued, then executing
    assert names.count("node_start") == 5
    assert names.count("text") == 40
    assert names[-1] == "result"
    assert everything[-1][2]["status"] == "completed"
    # From an id on: exactly the events after it.
    assert events(platform, run_id, last_event_id=str(ids[20])) == everything[21:]
    assert events(platform, run_id, last_event_id=str(ids[-1])) == []


def test_a_plain_invoke_stream_carries_event_ids_and_its_events_are_kept(platform):
    with httpx.stream(
        "POST",
        f"{platform.url}/api/v1/agents/steps/invoke",
        params={"stream": "true"},
        json={"input": "go", "session_id": "st"},
        headers=auth(),
        timeout=30,
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    ids = [int(line[4:]) for line in lines if line.startswith("id: ")]
    assert ids == list(range(1, len(ids) + 1))
    result = json.loads(lines[-1][6:])
    assert result["status"] == "completed"
    kept = events(platform, result["run_id"])
    assert [int(i) for i, _, _ in kept] == ids


def test_a_streamed_invoke_whose_client_goes_away_is_stopped_and_stores_nothing(platform, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "1.5")
    with httpx.stream(
        "POST",
        f"{platform.url}/api/v1/agents/slow/invoke",
        params={"stream": "true"},
        json={"input": "never mind", "session_id": "gone"},
        headers=auth(),
        timeout=30,
    ) as response:
        assert response.status_code == 200  # the stream has begun; the connection closes here
    time.sleep(3)  # past the time the model would have taken to answer
    runs = httpx.get(f"{platform.url}/api/v1/runs", params={"session_id": "gone"}, headers=auth()).json()
    assert [run["status"] for run in runs["runs"]] in ([], ["interrupted"], ["failed"]), runs
    session = httpx.get(f"{platform.url}/api/v1/agents/slow/sessions/gone", headers=auth())
    assert session.status_code == 404 or session.json()["messages"] == [], session.text


def test_a_plain_invoke_keeps_no_events_and_streams_its_result(platform):
    answer = post(platform, "/api/v1/agents/chat/invoke", {"input": "hi", "session_id": "p"})
    kept = events(platform, answer.json()["run_id"])
    assert [(i, name) for i, name, _ in kept] == [(None, "result")]
    assert kept[0][2]["output"] == answer.json()["output"]


def test_an_agent_tool_interrupt_is_answered_over_http(platform):
    first = post(platform, "/api/v1/agents/payer/invoke", {"input": "pay the invoice", "session_id": "pay"})
    assert first.status_code == 200, first.text
    answer = first.json()
    assert answer["status"] == "interrupted"
    [question] = answer["interrupts"]
    assert question["name"] == "approval"
    assert question["reason"] == {"amount": 5}
    assert question["tool"] == "approve_payment"
    assert question["node"] is None

    unknown = post(
        platform,
        "/api/v1/agents/payer/invoke",
        {"session_id": "pay", "responses": [{"interrupt_id": "int-nope", "response": "yes"}]},
    )
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["error"]["code"] == "unknown_interrupt"
    assert question["id"] in unknown.json()["error"]["message"]

    done = post(
        platform,
        "/api/v1/agents/payer/invoke",
        {"session_id": "pay", "responses": [{"interrupt_id": question["id"], "response": "yes"}]},
    )
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "completed"
    assert done.json()["output"] == "Payment handled."
    messages = get(platform, "/api/v1/agents/payer/sessions/pay").json()["messages"]
    results = [b["toolResult"] for m in messages for b in m["content"] if "toolResult" in b]
    assert results[0]["content"] == [{"text": "paid 5"}]

    again = post(
        platform,
        "/api/v1/agents/payer/invoke",
        {"session_id": "pay", "responses": [{"interrupt_id": question["id"], "response": "no"}]},
    )
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "interrupt_already_answered"
    assert done.json()["run_id"] in again.json()["error"]["message"]


def test_a_pipeline_interrupt_names_its_node_and_answers_in_the_background(platform):
    first = post(platform, "/api/v1/agents/review/invoke", {"input": "release", "session_id": "rel"})
    [question] = first.json()["interrupts"]
    assert (question["name"], question["reason"], question["node"]) == ("approve", "ship it?", "approve")
    run = post(
        platform,
        RUNS.format("review"),
        {"session_id": "rel", "responses": [{"interrupt_id": question["id"], "response": "ok"}]},
    )
    assert run.status_code == 202, run.text
    record = wait_final(platform, run.json()["run_id"])
    assert record["status"] == "completed", record
    assert record["nodes"]["publish"]["status"] == "completed"
    assert record["responses"] == [{"interrupt_id": question["id"], "response": "ok"}]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"responses": [{"interrupt_id": "x", "response": 1}]}, "responses_need_session"),
        (
            {"input": "a", "session_id": "s", "responses": [{"interrupt_id": "x"}]},
            "choose_input_or_responses",
        ),
        (
            {"session_id": "s", "responses": [{"interrupt_id": "x"}, {"interrupt_id": "x"}]},
            "duplicate_response",
        ),
    ],
)
def test_malformed_answers_are_refused_before_any_work(platform, body, code):
    answer = post(platform, "/api/v1/agents/payer/invoke", body)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == code


def test_cancel_stops_a_background_pipeline_saved_interrupted_and_resume_finishes_it(platform, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "0.3")
    run_id = post(platform, RUNS.format("steps"), {"input": "long", "session_id": "c1"}).json()["run_id"]
    deadline = time.monotonic() + 20
    while get(platform, f"/api/v1/runs/{run_id}").json()["status"] != "executing":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    cancelled = post(platform, f"/api/v1/runs/{run_id}/cancel")
    assert cancelled.status_code == 202, cancelled.text
    record = wait_final(platform, run_id)
    assert record["status"] == "interrupted"
    assert record["stopped"]["by"] == "cancel"
    done = [n for n, d in record["nodes"].items() if d["status"] == "completed"]
    assert len(done) < 5
    assert post(platform, f"/api/v1/runs/{run_id}/cancel").json()["error"]["code"] == "run_finished"

    resumed = post(platform, f"/api/v1/runs/{run_id}/resume")
    assert resumed.status_code == 202, resumed.text
    final = wait_final(platform, resumed.json()["run_id"])
    assert final["status"] == "completed"
    assert final["resumed"] is True
    assert {n for n, d in final["nodes"].items() if d["status"] == "completed"} == {
        "one",
        "two",
        "three",
        "four",
        "five",
    }
    assert get(platform, f"/api/v1/runs/{run_id}").json()["resumed_by"] == resumed.json()["run_id"]
    assert post(platform, f"/api/v1/runs/{run_id}/resume").json()["error"]["code"] == "not_resumable"


def test_a_cancelled_agent_turn_is_rolled_back(platform, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "5")
    run_id = post(platform, RUNS.format("slow"), {"input": "never mind", "session_id": "c2"}).json()["run_id"]
    deadline = time.monotonic() + 20
    while get(platform, f"/api/v1/runs/{run_id}").json()["status"] != "executing":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    post(platform, f"/api/v1/runs/{run_id}/cancel")
    record = wait_final(platform, run_id)
    assert (record["status"], record["stored"], record["stopped"]["by"]) == ("interrupted", False, "cancel")
    session = get(platform, "/api/v1/agents/slow/sessions/c2").json()
    assert session["messages"] == []  # the partial turn is gone


def test_a_stop_that_cannot_read_the_session_says_so_and_frees_the_session(platform, monkeypatch):
    # The cancel's rollback must read the session's journal; that read fails. The run must not claim
    # "nothing stored", must not stay executing, and the session must take its next message.
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "5")
    runtime = platform.app.state.runtime
    runtime.root = storage = FaultyStorage(runtime.root)
    run_id = post(platform, RUNS.format("slow"), {"input": "never mind", "session_id": "c3"}).json()["run_id"]
    deadline = time.monotonic() + 20
    while get(platform, f"/api/v1/runs/{run_id}").json()["status"] != "executing":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    storage.fail("list", "/journal/")
    post(platform, f"/api/v1/runs/{run_id}/cancel")
    record = wait_final(platform, run_id)
    assert storage.injected  # the fault was met
    assert (record["status"], record["stored"]) == ("interrupted", None)
    assert "not known" in record["stopped"]["note"]
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "0")
    answer = post(platform, "/api/v1/agents/slow/invoke", {"input": "again", "session_id": "c3"})
    assert answer.status_code == 200, answer.text


def test_two_resumes_at_once_start_one_run(platform, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "5")
    run_id = post(platform, RUNS.format("slow"), {"input": "once only", "session_id": "r2"}).json()["run_id"]
    deadline = time.monotonic() + 20
    while get(platform, f"/api/v1/runs/{run_id}").json()["status"] != "executing":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    post(platform, f"/api/v1/runs/{run_id}/cancel")
    wait_final(platform, run_id)
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "0.2")

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=platform.url, headers=auth(), timeout=30) as http:
            return list(await asyncio.gather(*(http.post(f"/api/v1/runs/{run_id}/resume") for _ in range(2))))

    answers = asyncio.run(both())
    assert sorted(a.status_code for a in answers) == [202, 409], [a.text for a in answers]
    started = next(a for a in answers if a.status_code == 202).json()["run_id"]
    assert wait_final(platform, started)["status"] == "completed"
    assert get(platform, f"/api/v1/runs/{run_id}").json()["resumed_by"] == started
    session = get(platform, "/api/v1/agents/slow/sessions/r2").json()
    texts = [b["text"] for m in session["messages"] for b in m["content"] if "text" in b]
    assert texts.count("once only") == 1


def test_a_stream_whose_storage_is_down_ends_with_the_error_a_request_would_get(platform):
    accepted = post(platform, RUNS.format("chat"), {"input": "hi", "session_id": "down"}).json()
    wait_final(platform, accepted["run_id"])
    runtime = platform.app.state.runtime
    runtime.workspaces.unsynced_root = storage = FaultyStorage(
        runtime.workspaces.unsynced_root
    )  # where events are kept
    storage.fail("list", "events/")
    kept = events(platform, accepted["run_id"])
    assert storage.injected
    assert kept[-1][1] == "error"
    assert kept[-1][2]["error"]["code"] == "storage_unavailable"
    assert kept[-1][2]["error"]["retry_after"] == 1  # as a plain request's 503 says
    assert kept[-1][2]["run_id"] == accepted["run_id"]


def test_an_idempotent_start_is_one_run(platform):
    body = {"input": "once", "session_id": "k"}
    first = post(platform, RUNS.format("chat"), body, headers={"Idempotency-Key": "bg-1"})
    again = post(platform, RUNS.format("chat"), body, headers={"Idempotency-Key": "bg-1"})
    assert first.json()["run_id"] == again.json()["run_id"]
    assert again.headers["idempotent-replayed"] == "true"
    wait_final(platform, first.json()["run_id"])
    texts = [
        m["content"][0]["text"] for m in get(platform, "/api/v1/agents/chat/sessions/k").json()["messages"]
    ]
    assert texts == ["once", "echo: once (turn 1)"]


def test_unknown_runs_and_bad_event_ids_are_4xx(platform):
    assert get(platform, "/api/v1/runs/nope/stream").status_code == 404
    assert post(platform, "/api/v1/runs/nope/cancel").status_code == 404
    run_id = post(platform, "/api/v1/agents/chat/invoke", {"input": "x"}).json()["run_id"]
    bad = get(platform, f"/api/v1/runs/{run_id}/stream", headers={"Last-Event-ID": "abc"})
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_last_event_id"


def test_a_turn_whose_side_effect_ran_is_kept_open_when_stopped_and_resumed_without_running_it_again(
    platform, tmp_path, monkeypatch
):
    paid = tmp_path / "paid.txt"
    monkeypatch.setenv("ORCHESTRA_TEST_PAID", str(paid))
    monkeypatch.setenv("ORCHESTRA_TEST_HANG", "30")
    run_id = post(platform, RUNS.format("effects"), {"input": "pay it", "session_id": "fx"}).json()["run_id"]
    deadline = time.monotonic() + 20
    while not (paid.exists() and paid.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    post(platform, f"/api/v1/runs/{run_id}/cancel")
    stopped = wait_final(platform, run_id)
    assert (stopped["status"], stopped["stored"]) == ("interrupted", True)
    assert "side-effecting tool" in stopped["stopped"]["note"]

    monkeypatch.setenv("ORCHESTRA_TEST_HANG", "0")
    resumed = post(platform, f"/api/v1/runs/{run_id}/resume")
    assert resumed.status_code == 202, resumed.text
    final = wait_final(platform, resumed.json()["run_id"])
    assert final["status"] == "completed", final
    assert final["output"] == "Paid and confirmed."
    assert paid.read_text().split() == ["30"]  # the payment ran once
    messages = get(platform, "/api/v1/agents/effects/sessions/fx").json()["messages"]
    users = [b["text"] for m in messages if m["role"] == "user" for b in m["content"] if "text" in b]
    assert users == ["pay it"]  # finished from the session, not sent again


def test_an_answered_interrupt_closes_the_run_that_asked_it_on_every_server(platform, tmp_path):
    """Issue 35 item 5: once a later run answers a run's interrupts (a message with responses, or a
    background run with them), the run that asked reads ``answered``, names the answering run and lists no
    question, on another server too; a record left waiting (its answering server died before closing
    it) is closed when it is read."""
    from tests.server.conftest import Server

    with Server(tmp_path / "platform.yaml") as other:
        closes: dict[str, tuple[dict, dict, str]] = {}
        for sid, background in (("close-plain", False), ("close-bg", True)):
            asked = post(platform, "/api/v1/agents/payer/invoke", {"input": "pay", "session_id": sid}).json()
            (question,) = asked["interrupts"]
            body = {"responses": [{"interrupt_id": question["id"], "response": "yes"}], "session_id": sid}
            if background:
                answering = post(platform, RUNS.format("payer"), body).json()["run_id"]
                assert wait_final(platform, answering)["status"] == "completed"
            else:
                answered = post(platform, "/api/v1/agents/payer/invoke", body).json()
                assert answered["status"] == "completed"
                answering = answered["run_id"]
            closed = get(other, f"/api/v1/runs/{asked['run_id']}").json()
            assert (closed["status"], closed["resumed_by"], closed["interrupts"]) == (
                "answered",
                answering,
                [],
            )
            listed = get(other, "/api/v1/runs", params={"session_id": sid}).json()["runs"]
            assert {r["run_id"]: r["status"] for r in listed} == {
                asked["run_id"]: "answered",
                answering: "completed",
            }
            closes[sid] = (asked, question, answering)

        # The answering server died before it closed the asking run: its record still reads waiting.
        from orchestra.storage import LocalFileStorage

        asked, question, answering = closes["close-plain"]
        store = LocalFileStorage(str(tmp_path / "store"))
        key = f"ws/acme/runs/payer/close-plain/{asked['run_id']}.json"
        data, _ = asyncio.run(store.read(key))
        waiting = {**json.loads(data), "status": "interrupted", "resumed_by": None, "interrupts": [question]}
        asyncio.run(store.write(key, json.dumps(waiting).encode()))
        healed = get(other, f"/api/v1/runs/{asked['run_id']}").json()
        assert (healed["status"], healed["resumed_by"], healed["interrupts"]) == ("answered", answering, [])
