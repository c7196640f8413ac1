"""The HTTP API over real HTTP: the three memory modes, reads, auth and isolation, bad input, streaming."""

import httpx
import pytest

from tests.server.conftest import auth


def invoke(server, agent, body, workspace="acme", **params):
    return httpx.post(
        f"{server.url}/api/v1/agents/{agent}/invoke",
        json=body,
        headers=auth(workspace),
        params=params,
        timeout=30,
    )


def test_session_mode_keeps_and_replays_the_conversation(server):
    first = invoke(
        server, "chat", {"input": {"message": "What's the weather in London?"}, "session_id": "user-123"}
    )
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["output"] == "echo: What's the weather in London? (turn 1)"
    assert body["session_id"] == "user-123"
    assert body["run_id"]
    assert body["usage"]["total_tokens"] > 0
    second = invoke(server, "chat", {"input": {"message": "What about Paris?"}, "session_id": "user-123"})
    assert second.json()["output"] == "echo: What about Paris? (turn 2)"


def test_sessions_are_per_agent(server):
    invoke(server, "chat", {"input": "one", "session_id": "shared"})
    assert (
        invoke(server, "helper", {"input": "note it", "session_id": "shared"}).json()["output"]
        == "Noted in your todo list."
    )
    assert (
        invoke(server, "chat", {"input": "two", "session_id": "shared"}).json()["output"]
        == "echo: two (turn 2)"
    )
    helper = httpx.get(f"{server.url}/api/v1/agents/helper/sessions/shared", headers=auth()).json()
    assert len(helper["messages"]) == 4  # the helper's own history, not the chat's


def test_stateless_mode_uses_the_history_and_persists_nothing(server):
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    reply = invoke(server, "chat", {"input": "and now?", "history": history})
    assert reply.json()["output"] == "echo: and now? (turn 2)"
    assert reply.json()["session_id"] is None
    assert httpx.get(f"{server.url}/api/v1/agents/chat/sessions", headers=auth()).json()["sessions"] == []
    run = httpx.get(f"{server.url}/api/v1/runs/{reply.json()['run_id']}", headers=auth()).json()
    assert run["caller_history"] == 2
    stored = str(run["messages"])
    assert "hello" not in stored  # the caller's history is not kept...
    assert "and now?" in stored  # ...only what this invocation added


def test_no_memory_calls_are_independent(server):
    assert invoke(server, "chat", {"input": "a"}).json()["output"] == "echo: a (turn 1)"
    assert invoke(server, "chat", {"input": "b"}).json()["output"] == "echo: b (turn 1)"


def test_both_modes_at_once_is_422(server):
    reply = invoke(server, "chat", {"input": "x", "session_id": "s", "history": []})
    assert reply.status_code == 422
    assert reply.json()["error"]["code"] == "choose_one_mode"
    assert "not both" in reply.json()["error"]["message"]


def test_a_pipeline_session_resumes_its_interrupted_run(server):
    first = invoke(server, "approval", {"input": "ship v2", "session_id": "release"})
    assert first.json()["status"] == "interrupted"
    run = httpx.get(f"{server.url}/api/v1/runs/{first.json()['run_id']}", headers=auth()).json()
    assert run["nodes"]["draft"]["status"] == "completed"
    assert run["nodes"]["approve"]["status"] == "interrupted"
    again = invoke(server, "approval", {"input": "anything", "session_id": "release"})
    assert again.json()["resumed"] is True


def test_reads_agents_sessions_runs_and_delete(server):
    invoke(server, "helper", {"input": "remember milk", "session_id": "s1"})
    agents = httpx.get(f"{server.url}/api/v1/agents", headers=auth()).json()["agents"]
    assert [a["id"] for a in agents] == ["chat", "helper", "approval"]
    assert agents[0]["description"] == "An echoing chat agent"
    sessions = httpx.get(f"{server.url}/api/v1/agents/helper/sessions", headers=auth()).json()["sessions"]
    assert [s["session_id"] for s in sessions] == ["s1"]
    messages = httpx.get(f"{server.url}/api/v1/agents/helper/sessions/s1", headers=auth()).json()["messages"]
    assert messages[1]["content"][0]["toolUse"]["name"] == "notebook"

    runs = httpx.get(
        f"{server.url}/api/v1/runs", params={"agent_id": "helper", "session_id": "s1"}, headers=auth()
    ).json()["runs"]
    assert len(runs) == 1
    detail = httpx.get(f"{server.url}/api/v1/runs/{runs[0]['run_id']}", headers=auth()).json()
    assert detail["status"] == "completed"
    assert detail["duration_ms"] > 0
    assert detail["usage"]["total_tokens"] > 0
    assert any("toolResult" in b for m in detail["messages"] for b in m["content"])

    assert httpx.delete(f"{server.url}/api/v1/agents/helper/sessions/s1", headers=auth()).status_code == 204
    assert httpx.delete(f"{server.url}/api/v1/agents/helper/sessions/s1", headers=auth()).status_code == 404
    assert httpx.get(f"{server.url}/api/v1/agents/helper/sessions/s1", headers=auth()).status_code == 404


def test_openapi_document(server):
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert "/api/v1/agents/{agent_id}/invoke" in spec["paths"]
    typed = {
        "/api/v1/agents": "AgentList",
        "/api/v1/agents/{agent_id}/sessions": "SessionList",
        "/api/v1/agents/{agent_id}/sessions/{session_id}": "SessionDetail",
        "/api/v1/runs": "RunList",
        "/api/v1/runs/{run_id}": "RunRecord",
    }
    for path, model in typed.items():  # every read answers a named, typed schema, not a loose object
        schema = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{model}"}, path
    summary = spec["components"]["schemas"]["RunSummary"]
    assert set(summary["required"]) >= {"run_id", "agent_id", "started_at"}
    assert {"status", "usage", "output"} <= set(summary["properties"])


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Basic YWJj"},
        {"Authorization": "acme-secret-key"},
    ],
)
def test_every_api_route_needs_a_valid_key(server, headers):
    for method, path in [
        ("GET", "/api/v1/agents"),
        ("POST", "/api/v1/agents/chat/invoke"),
        ("GET", "/api/v1/agents/chat/sessions"),
        ("GET", "/api/v1/runs"),
        ("DELETE", "/api/v1/agents/chat/sessions/x"),
    ]:
        reply = httpx.request(method, f"{server.url}{path}", headers=headers, json={"input": "x"})
        assert reply.status_code == 401, path
        assert reply.json()["error"]["code"] == "unauthorized"
        assert reply.headers["www-authenticate"] == "Bearer"


def test_workspaces_never_see_each_other(server):
    mine = invoke(server, "chat", {"input": "secret", "session_id": "private"}).json()
    assert invoke(server, "chat", {"input": "x"}, workspace="globex").status_code == 404
    assert [
        a["id"] for a in httpx.get(f"{server.url}/api/v1/agents", headers=auth("globex")).json()["agents"]
    ] == ["other"]
    assert httpx.get(f"{server.url}/api/v1/runs/{mine['run_id']}", headers=auth("globex")).status_code == 404
    assert (
        httpx.get(f"{server.url}/api/v1/agents/chat/sessions/private", headers=auth("globex")).status_code
        == 404
    )
    assert (
        httpx.get(
            f"{server.url}/api/v1/runs", params={"agent_id": "chat"}, headers=auth("globex")
        ).status_code
        == 404
    )
    assert httpx.get(f"{server.url}/api/v1/runs", headers=auth("globex")).json()["runs"] == []


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b'{"input": "x"', 400, "invalid_json"),
        (b"[1, 2]", 422, "invalid_request"),
        (b'{"input": "x", "session_id": 5}', 422, "invalid_request"),
        (b'{"input": "x", "session_id": "has space"}', 422, "invalid_session_id"),
        (b'{"input": "x", "history": [{"role": "system", "content": "x"}]}', 422, "invalid_request"),
        (b'{"input": "x", "history": "not a list"}', 422, "invalid_request"),
        (b'{"input": "x", "colour": "red"}', 422, "invalid_request"),
        (b"{}", 422, "invalid_request"),
        (b'{"input": "' + b"x" * 30000 + b'"}', 413, "body_too_large"),
    ],
)
def test_bad_input_is_a_4xx_that_says_what_to_fix(server, content, status, code):
    reply = httpx.post(
        f"{server.url}/api/v1/agents/chat/invoke",
        content=content,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["code"] == code
    assert reply.json()["error"]["message"]


def test_history_too_long_and_unknown_agent(server):
    history = [{"role": "user", "content": str(i)} for i in range(7)]
    reply = invoke(server, "chat", {"input": "x", "history": history})
    assert reply.status_code == 422
    assert "limit is 6" in reply.json()["error"]["message"]
    unknown = invoke(server, "nobody", {"input": "x"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "unknown_agent"


def test_a_chunked_body_over_the_limit_is_413(server):
    def chunks():
        for _ in range(30):
            yield b"x" * 1000

    reply = httpx.post(f"{server.url}/api/v1/agents/chat/invoke", content=chunks(), headers=auth())
    assert reply.status_code == 413


def test_streaming_as_server_sent_events(server):
    with httpx.stream(
        "POST",
        f"{server.url}/api/v1/agents/helper/invoke",
        params={"stream": "true"},
        json={"input": "remember"},
        headers=auth(),
    ) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        events = [line[7:] for line in reply.iter_lines() if line.startswith("event: ")]
    assert events[:3] == ["tool_call", "state", "tool_result"]  # the notebook tool wrote the agent's state
    assert "text" in events
    assert events[-1] == "result"


@pytest.mark.parametrize("session_id", [".", "..", ".lock", "abc\n", "x" * 129, "a/b", "a\\b", "a\x00b"])
def test_ids_the_storage_refuses_are_answered_422_before_any_work(server, session_id):
    response = invoke(server, "chat", {"input": "hi", "session_id": session_id})
    assert response.status_code == 422, response.text
    assert "session_id" in response.json()["error"]["message"]
    listing = httpx.get(
        f"{server.url}/api/v1/runs", params={"session_id": session_id}, headers=auth("acme"), timeout=30
    )
    assert listing.status_code == 422, listing.text
    assert "session_id" in listing.json()["error"]["message"]


@pytest.mark.parametrize("run_id", ["x" * 300, ".hidden", "a%0Ab", "%00"])
def test_bad_run_ids_are_4xx_json_never_500(server, run_id):
    response = httpx.get(f"{server.url}/api/v1/runs/{run_id}", headers=auth("acme"), timeout=30)
    assert 400 <= response.status_code < 500, response.text
    assert "error" in response.json()


def test_a_custom_model_that_raises_is_a_recorded_502(server):
    response = invoke(server, "chat", {"input": "EXPLODE", "session_id": "boom"})
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "run_failed"
    run_id = error["message"].rsplit("run ", 1)[1].rstrip(")")
    run = httpx.get(f"{server.url}/api/v1/runs/{run_id}", headers=auth(), timeout=30).json()
    assert run["status"] == "failed"
    assert "exploded" in run["error"]


def test_text_that_cannot_be_stored_is_422_before_the_model_is_called(server):
    body = '{"input": "hi \\ud800 there", "session_id": "surrogate"}'
    response = httpx.post(
        f"{server.url}/api/v1/agents/chat/invoke",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_text"
    runs = httpx.get(f"{server.url}/api/v1/runs", params={"agent_id": "chat"}, headers=auth(), timeout=30)
    assert runs.json()["runs"] == []  # nothing ran, nothing was recorded


def test_the_server_keeps_in_memory_only_the_runs_being_served(server):
    from orchestra.hosting.session_queue import _CACHED

    for index in range(20):
        assert invoke(server, "chat", {"input": "hi", "session_id": f"s-{index}"}).status_code == 200
    invoke(server, "chat", {"input": "hi", "session_id": ".."})  # refused before any work
    runtime = server.app.state.runtime
    slots = runtime.slots("acme")
    assert slots.local == set()  # no session is held after its turn
    assert runtime.running_here.runs == {}
    assert runtime.stops.running == {}
    assert runtime.running_here.logs == {}
    assert slots.here == {}
    assert slots.plain == {}
    assert slots.waiters == {}
    # enqueue turns (the default policy) leave their sessions' busy documents idle
    assert all(state.active is None and not state.queue for _, state in slots._versions.values())
    assert _CACHED == 4096  # what it may hold: the versions of the documents seen last


def test_every_answer_has_a_request_id_and_refusals_are_logged_with_it(server, caplog):
    caplog.set_level("WARNING", logger="orchestra.server")
    ok = invoke(server, "chat", {"input": "hi"})
    assert len(ok.headers["x-request-id"]) == 16

    refused = httpx.post(f"{server.url}/api/v1/agents/chat/invoke", json={"input": "hi"}, timeout=30)
    assert refused.status_code == 401
    request_id = refused.headers["x-request-id"]
    assert refused.json()["error"]["request_id"] == request_id
    failed = invoke(server, "chat", {"input": "EXPLODE"})
    assert failed.status_code == 502
    logged = {
        (r.getMessage(), getattr(r, "request_id", None), getattr(r, "status", None)) for r in caplog.records
    }
    assert ("auth_refused", request_id, 401) in logged
    assert ("request_failed", failed.headers["x-request-id"], 502) in logged
    assert ok.headers["x-request-id"] not in {line[1] for line in logged}  # a success is not logged
