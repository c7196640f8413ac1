"""``POST /api/v1/runs/{id}/events`` on one server (in this process): an event sent while the run still
sleeps is kept until its wait begins; a key reused for another event is refused; a run without a session
cannot take events. (Across servers and kills: test_waits_across_servers.py.)"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.server.conftest import Server, auth
from tests.server.test_waits_across_servers import order_config
from tests.server.wait_steps import REMINDER, calls


@pytest.fixture
def order_server(tmp_path, monkeypatch):
    clock = tmp_path / "clock"
    clock.write_text("0")
    monkeypatch.setenv("ORCHESTRA_TEST_CLOCK", str(clock))
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(tmp_path / "calls"))
    config = order_config(tmp_path, f"file:{tmp_path}/store")
    (tmp_path / "reminder.yaml").write_text(REMINDER)
    hosted = "  - {id: reminder, spec: reminder.yaml, workspace: acme}\n"
    config.write_text(config.read_text().replace("  - {id: other,", hosted + "  - {id: other,"))
    with Server(config) as running:
        yield running, clock, tmp_path / "calls"


def newest(http: httpx.Client) -> dict:
    return http.get("/api/v1/runs", params={"agent_id": "order", "session_id": "s1"}).json()["runs"][0]


def until(predicate, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def test_an_event_sent_while_the_run_sleeps_is_kept_for_its_wait(order_server):
    server, clock, counted = order_server
    with httpx.Client(base_url=server.url, headers=auth(), timeout=30) as http:
        run_id = http.post("/api/v1/agents/order/runs", json={"input": "o1", "session_id": "s1"}).json()[
            "run_id"
        ]
        until(lambda: newest(http)["status"] == "interrupted")
        body = {"name": "payment", "payload": {"amount": 5}}
        sent = http.post(f"/api/v1/runs/{run_id}/events", json=body, headers={"Idempotency-Key": "k1"})
        assert sent.status_code == 202, sent.text
        assert sent.json()["duplicate"] is False
        reused = http.post(
            f"/api/v1/runs/{run_id}/events",
            json={**body, "payload": {"amount": 6}},
            headers={"Idempotency-Key": "k1"},
        )
        assert reused.status_code == 422
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
        assert calls(counted) == ["before"]  # still asleep: the event waits for its wait

        clock.write_text("3601")
        done = until(lambda: (r := newest(http))["status"] == "completed" and r)
        assert done["output"] == "shipped"
        assert (
            calls(counted)[-1] == 'after {"event": "payment", "payload": {"amount": 5}, "timed_out": false}'
        )


def test_a_run_without_a_session_takes_no_events(order_server):
    server, _, _ = order_server
    with httpx.Client(base_url=server.url, headers=auth(), timeout=30) as http:
        run_id = http.post("/api/v1/agents/chat/invoke", json={"input": "hi"}).json()["run_id"]
        refused = http.post(f"/api/v1/runs/{run_id}/events", json={"name": "payment"})
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "no_session"
        assert http.post("/api/v1/runs/nope/events", json={"name": "payment"}).status_code == 404


def test_an_agents_tool_that_sleeps_frees_the_session_and_is_woken_once(order_server):
    server, clock, counted = order_server
    with httpx.Client(base_url=server.url, headers=auth(), timeout=30) as http:
        asleep = http.post(
            "/api/v1/agents/reminder/invoke", json={"input": "remind me", "session_id": "r1"}
        ).json()
        assert asleep["status"] == "interrupted"
        assert asleep["interrupts"][0]["tool"] == "remind_later"

        def newest_reminder() -> dict:
            return http.get("/api/v1/runs", params={"agent_id": "reminder", "session_id": "r1"}).json()[
                "runs"
            ][0]

        assert [w["kind"] for w in newest_reminder()["waiting"]] == ["timer"]
        clock.write_text("3601")
        done = until(lambda: (r := newest_reminder())["status"] == "completed" and r)
        assert done["output"] == "Reminded."
        assert calls(counted) == ["reminded call Bo"]


def test_the_client_and_the_cli_send_events_once_per_key(order_server):
    from typer.testing import CliRunner

    from orchestra.cli import app
    from orchestra.client import Client
    from tests.server.conftest import KEYS

    server, clock, counted = order_server
    with Client(server.url, KEYS["acme"]) as client:
        run_id = client.start_run("order", "o2", session_id="s1").run_id
        until(lambda: client.run(run_id)["status"] == "interrupted")
        sent = client.send_event(run_id, "payment", {"amount": 9}, idempotency_key="k9")
        assert (sent["session_id"], sent["duplicate"]) == ("s1", False)
        command = ["runs", "send-event", run_id, "payment", "--payload", '{"amount": 9}', "--key", "k9"]
        again = CliRunner().invoke(app, [*command, "--url", server.url, "--api-key", KEYS["acme"]])
        assert again.exit_code == 0, again.output
        assert "already sent (nothing new kept)" in again.stdout
        clock.write_text("3601")
        until(lambda: client.runs("order", "s1")[0]["status"] == "completed")
    assert calls(counted)[-1] == 'after {"event": "payment", "payload": {"amount": 9}, "timed_out": false}'


def test_a_deleted_sessions_waiting_run_is_never_woken_and_its_events_go(order_server, tmp_path):
    """Deleting a session whose run waits (for a timer, then an event) deletes the wait's entry and the
    session's inbox: the sweep never wakes the run, and the event's payload is not kept."""
    from tests.server.test_deleted_sessions import stored_values

    server, clock, counted = order_server
    with httpx.Client(base_url=server.url, headers=auth(), timeout=30) as http:
        run_id = http.post("/api/v1/agents/order/runs", json={"input": "o1", "session_id": "s1"}).json()[
            "run_id"
        ]
        until(lambda: newest(http)["status"] == "interrupted")
        body = {"name": "payment", "payload": {"card": "4111-deleted"}}
        assert http.post(f"/api/v1/runs/{run_id}/events", json=body).status_code == 202
        assert any(b"4111-deleted" in value for _, value in stored_values(f"file:{tmp_path}/store"))

        assert http.delete("/api/v1/agents/order/sessions/s1").status_code == 204
        clock.write_text("3601")  # the wait is due: a sweep would wake the run now
        time.sleep(1.5)  # several sweeps (runs.sweep_s 0.3): a wake now would be a bug
        assert calls(counted) == ["before"]
        assert http.get(f"/api/v1/runs/{run_id}").status_code == 404
    left = [key for key, value in stored_values(f"file:{tmp_path}/store") if b"4111-deleted" in value]
    assert left == []
