"""Ownership (issue 38 item 2): two users of one workspace. Every route, stream, door and dashboard page
gives bob a 404 (never 403) for alice's session, run and interrupt; an admin role sees the workspace;
per-agent permissions say who may call what."""

from __future__ import annotations

import json
import re
import uuid

import httpx
import pytest

from orchestra.client import Client, NotFoundError
from tests.server.conftest import Server
from tests.server.tenants import USER_KEYS, Issuer, bearer, issuer_fixture, server_fixture

pytestmark = pytest.mark.timeout(180)

ALLOW = "  - {id: only-admins, spec: chat.yaml, workspace: acme, allow: ['role:admin', 'carol']}\n"

issuer = issuer_fixture()
api = server_fixture("ownership", agents=ALLOW)


@pytest.fixture(scope="module")
def alice_things(api: Server, issuer: Issuer) -> dict[str, str]:
    """What alice made: a chat session and its run, a pipeline waiting on an interrupt, an A2A task."""
    alice = bearer(issuer.token("alice"))
    with httpx.Client(base_url=api.url, headers=alice, timeout=60) as http:
        chat = http.post("/api/v1/agents/chat/invoke", json={"input": "secret", "session_id": "a-chat"})
        assert chat.status_code == 200, chat.text
        asked = http.post("/api/v1/agents/approval/invoke", json={"input": "ship", "session_id": "a-appr"})
        assert asked.json()["status"] == "interrupted", asked.text
        rpc = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": str(uuid.uuid4()),
                    "contextId": "a-a2a",
                    "parts": [{"kind": "text", "text": "secret too"}],
                }
            },
        }
        task = http.post("/a2a/chat/", json=rpc).json()["result"]
    return {
        "run": chat.json()["run_id"],
        "interrupted_run": asked.json()["run_id"],
        "interrupt": asked.json()["interrupts"][0]["id"],
        "task": task["id"],
    }


def test_bob_gets_404_for_alice_s_things_on_every_route(
    api: Server, issuer: Issuer, alice_things: dict[str, str]
) -> None:
    bob = bearer(issuer.token("bob"))
    run, interrupted = alice_things["run"], alice_things["interrupted_run"]
    refused = {
        ("GET", "/api/v1/agents/chat/sessions/a-chat", None),
        ("DELETE", "/api/v1/agents/chat/sessions/a-chat", None),
        ("POST", "/api/v1/agents/chat/sessions/a-chat/resume", None),
        ("POST", "/api/v1/agents/chat/invoke", '{"input": "peek", "session_id": "a-chat"}'),
        ("POST", "/api/v1/agents/chat/invoke?stream=true", '{"input": "peek", "session_id": "a-chat"}'),
        ("POST", "/api/v1/agents/chat/runs", '{"input": "peek", "session_id": "a-chat"}'),
        (
            "POST",
            "/api/v1/agents/approval/invoke",
            json.dumps(
                {
                    "session_id": "a-appr",
                    "responses": [{"interrupt_id": alice_things["interrupt"], "response": "yes"}],
                }
            ),
        ),
        ("GET", f"/api/v1/runs/{run}", None),
        ("GET", f"/api/v1/runs/{run}/stream", None),
        ("POST", f"/api/v1/runs/{interrupted}/cancel", None),
        ("POST", f"/api/v1/runs/{interrupted}/resume", None),
        ("GET", f"/api/v1/runs/{interrupted}", None),
        ("POST", "/api/v1/agents/only-admins/invoke", '{"input": "hi"}'),
    }
    with httpx.Client(base_url=api.url, headers=bob, timeout=60) as http:
        for method, path, body in sorted(refused):
            answer = http.request(method, path, content=body, headers={"Content-Type": "application/json"})
            assert answer.status_code == 404, (method, path, answer.text)
            assert "secret" not in answer.text
        runs = http.get("/api/v1/runs").json()["runs"]
        assert not {run, interrupted} & {r["run_id"] for r in runs}
        sessions = http.get("/api/v1/agents/chat/sessions").json()["sessions"]
        assert "a-chat" not in {s["session_id"] for s in sessions}
        found = http.get("/api/v1/sessions").json()["sessions"]  # the search of sessions (issue 37 item 5)
        assert "a-chat" not in {s["session_id"] for s in found}
        assert not {run, interrupted} & {
            r["run_id"] for r in http.get("/api/v1/runs?status=completed").json()["runs"]
        }
        assert "only-admins" not in {a["id"] for a in http.get("/api/v1/agents").json()["agents"]}
        # bob's own session of the same agent is his: he reads it, lists it, and alice's is untouched
        mine = http.post("/api/v1/agents/chat/invoke", json={"input": "mine", "session_id": "b-chat"})
        assert mine.status_code == 200
        assert http.get("/api/v1/agents/chat/sessions/b-chat").status_code == 200
        assert {s["session_id"] for s in http.get("/api/v1/agents/chat/sessions").json()["sessions"]} == {
            "b-chat"
        }
    alice = bearer(issuer.token("alice"))
    with httpx.Client(base_url=api.url, headers=alice, timeout=60) as http:
        kept = http.get("/api/v1/agents/chat/sessions/a-chat")
        assert kept.status_code == 200
        assert "secret" in kept.text
        assert http.get(f"/api/v1/runs/{interrupted}").json()["status"] == "interrupted"
        assert http.get("/api/v1/agents/chat/sessions/b-chat").status_code == 404


def test_bob_gets_nothing_of_alice_s_through_the_doors(
    api: Server, issuer: Issuer, alice_things: dict[str, str]
) -> None:
    bob = bearer(issuer.token("bob"))
    with httpx.Client(base_url=api.url, headers=bob, timeout=60) as http:
        agui = http.post(
            "/ag-ui/chat",
            json={
                "threadId": "a-chat",
                "runId": "r1",
                "messages": [{"id": "m1", "role": "user", "content": "peek"}],
                "tools": [],
                "context": [],
                "state": {},
                "forwardedProps": {},
            },
        )
        assert agui.status_code == 404, agui.text
        get_task = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": alice_things["task"]}}
        task = http.post("/a2a/chat/", json=get_task).json()
        assert "result" not in task, task
        assert "secret" not in str(task)
        rpc = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "message/send",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": str(uuid.uuid4()),
                    "contextId": "a-a2a",
                    "parts": [{"kind": "text", "text": "peek"}],
                }
            },
        }
        joined = http.post("/a2a/chat/", json=rpc).json()
        assert joined["result"]["status"]["state"] == "failed", joined
        assert "secret" not in str(joined)
        mcp = _mcp_call(http, "chat", {"input": "peek", "session_id": "a-chat"})
        assert mcp["isError"] is True
        assert "no session" in mcp["content"][0]["text"]


def _mcp_call(http: httpx.Client, tool: str, arguments: dict[str, str]) -> dict:
    """One MCP tools/call over streamable HTTP (stateless: no initialize needed), its JSON-RPC result."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    answer = http.post("/mcp", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    data = re.findall(r"^data: (.*)$", answer.text, re.M)
    result: dict = json.loads(data[-1] if data else answer.text)["result"]
    return result


def test_bob_s_dashboard_shows_none_of_alice_s(api: Server, alice_things: dict[str, str]) -> None:
    with httpx.Client(base_url=api.url, timeout=60, follow_redirects=False) as http:
        page = http.get("/login")
        csrf = re.search(r"name='csrf' value='([^']+)'", page.text).group(1)  # type: ignore[union-attr]
        login = http.post(
            "/login",
            data={"csrf": csrf, "key": USER_KEYS["bob"]},
            headers={"Origin": api.url},
        )
        assert login.status_code == 303, login.text
        assert http.get(f"/runs/{alice_things['run']}").status_code == 404
        assert http.get(f"/runs/{alice_things['interrupted_run']}").status_code == 404
        assert http.get("/sessions/chat/a-chat").status_code == 404
        home = http.get("/")
        assert alice_things["run"][:13] not in home.text
        assert "a-chat" not in home.text


def test_an_admin_role_sees_the_workspace(api: Server, issuer: Issuer, alice_things: dict[str, str]) -> None:
    admin = bearer(issuer.token("dana", roles=["admin"]))
    with httpx.Client(base_url=api.url, headers=admin, timeout=60) as http:
        assert http.get("/api/v1/agents/chat/sessions/a-chat").status_code == 200
        assert http.get(f"/api/v1/runs/{alice_things['run']}").json()["owner"] == "alice"
        assert alice_things["run"] in {r["run_id"] for r in http.get("/api/v1/runs").json()["runs"]}
        assert http.post("/api/v1/agents/only-admins/invoke", json={"input": "hi"}).status_code == 200
    carol = bearer(issuer.token("carol"))
    assert (
        httpx.post(
            f"{api.url}/api/v1/agents/only-admins/invoke", json={"input": "hi"}, headers=carol, timeout=60
        ).status_code
        == 200
    )


def test_each_user_has_a_memory_of_their_own(api: Server, issuer: Issuer) -> None:
    """Issue 36 item 4 with identities: a JWT user's memory is bound to the user, so bob, in the same
    workspace, gets a 404 for alice's item and finds nothing of hers; a workspace-wide key keeps the
    workspace's memory apart from both."""
    with Client(api.url, issuer.token("alice")) as alice, Client(api.url, issuer.token("bob")) as bob:
        alice.memory.put(["notes"], "plan", {"text": "secret plan: buy globex"})
        assert alice.memory.get(["notes"], "plan")["value"] == {"text": "secret plan: buy globex"}
        with pytest.raises(NotFoundError):
            bob.memory.get(["notes"], "plan")
        with pytest.raises(NotFoundError):
            bob.memory.delete(["notes"], "plan")
        assert bob.memory.search([]) == []
        assert bob.memory.namespaces() == []
        assert alice.memory.namespaces() == [["notes"]]
        bob.memory.put(["notes"], "plan", {"text": "bob's own plan"})
        assert alice.memory.get(["notes"], "plan")["value"] == {"text": "secret plan: buy globex"}


def test_a_schedule_and_its_runs_are_its_maker_s(api: Server, issuer: Issuer) -> None:
    """Schedules record who made them: bob gets a 404 for alice's schedule on every route and does not see
    it listed; an admin role sees it; a run it starts (run now, even an admin's) and its session are alice's. Alice cannot
    schedule an agent she may not call, nor runs on bob's session."""
    alice, bob = bearer(issuer.token("alice")), bearer(issuer.token("bob"))
    admin = bearer(issuer.token("dana", roles=["admin"]))
    body = {"id": "a-daily", "agent": "chat", "cron": "0 7 * * *", "input": "report {date}", "paused": True}
    bobs = httpx.post(
        f"{api.url}/api/v1/agents/chat/invoke", json={"input": "mine", "session_id": "b-chat"}, headers=bob
    )
    assert bobs.status_code == 200, bobs.text
    with httpx.Client(base_url=api.url, headers=alice, timeout=60) as http:
        made = http.post("/api/v1/schedules", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["owner"] == "alice"
        assert [s["id"] for s in http.get("/api/v1/schedules").json()["schedules"]] == ["a-daily"]
        started = http.post("/api/v1/schedules/a-daily/run")
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        assert http.get(f"/api/v1/runs/{run_id}").json()["owner"] == "alice"
        with Client(api.url, issuer.token("alice")) as client:
            session_id = client.wait(run_id, timeout=60)["session_id"]
        assert http.get(f"/api/v1/agents/chat/sessions/{session_id}").status_code == 200
    with httpx.Client(base_url=api.url, headers=bob, timeout=60) as http:
        assert "a-daily" not in {s["id"] for s in http.get("/api/v1/schedules").json()["schedules"]}
        assert http.get("/api/v1/schedules/a-daily").status_code == 404
        for action in ("pause", "resume", "run"):
            refused = http.post(f"/api/v1/schedules/a-daily/{action}")
            assert refused.status_code == 404, (action, refused.text)
        assert http.delete("/api/v1/schedules/a-daily").status_code == 404
        assert http.get(f"/api/v1/runs/{run_id}").status_code == 404
        assert http.get(f"/api/v1/agents/chat/sessions/{session_id}").status_code == 404
        assert run_id not in {r["run_id"] for r in http.get("/api/v1/runs").json()["runs"]}
    with httpx.Client(base_url=api.url, headers=admin, timeout=60) as http:
        assert "a-daily" in {s["id"] for s in http.get("/api/v1/schedules").json()["schedules"]}
        assert http.get("/api/v1/schedules/a-daily").json()["paused"] is True
        by_admin = http.post("/api/v1/schedules/a-daily/run")
        assert by_admin.status_code == 202, by_admin.text
        assert by_admin.json()["owner"] == "alice"
    with httpx.Client(base_url=api.url, headers=alice, timeout=60) as http:
        assert http.get(f"/api/v1/runs/{by_admin.json()['run_id']}").status_code == 200
        for taken in ({"agent": "only-admins"}, {"session": "continue", "session_id": "b-chat"}):
            refused = http.post("/api/v1/schedules", json={**body, "id": "a-sneaky", **taken})
            assert refused.status_code == 404, (taken, refused.text)
        assert http.delete("/api/v1/schedules/a-daily").status_code == 204
