"""Quotas and rate limits (issue 38 item 3): a spent quota answers 429 naming the quota and its reset; a
pipeline that meets one mid-way is saved interrupted with the reason; ``GET /api/v1/usage``; and three
server processes on one storage, under concurrent load with one SIGKILLed, never pass a token quota by
more than the calls in flight and never count a call twice."""

from __future__ import annotations

import json
import random
import signal
import sqlite3

import anyio
import httpx
import pytest

from tests.server.conftest import FAST_RUNS, Server, auth, counted_config, write_platform_config
from tests.server.test_concurrency import free_port, start_server

pytestmark = pytest.mark.timeout(300)


def _quota(limits: str, extra: str = "") -> str:
    return f"quotas:\n  limits:\n{limits}{extra}"


def test_a_spent_quota_is_429_naming_it_and_usage_shows_it(tmp_path) -> None:
    limits = "    - {workspace: acme, period: day, model_calls: 3}\n"
    config = write_platform_config(tmp_path, f"file:{tmp_path}/store", FAST_RUNS + _quota(limits))
    with Server(config) as server, httpx.Client(base_url=server.url, headers=auth(), timeout=60) as http:
        for turn in range(3):
            assert http.post("/api/v1/agents/chat/invoke", json={"input": f"t{turn}"}).status_code == 200
        refused = http.post("/api/v1/agents/chat/invoke", json={"input": "one more"})
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "quota_exceeded"
        assert "acme/day" in error["message"]
        assert "model_calls 3" in error["message"]
        assert "resets at" in error["message"]
        assert 1 <= int(refused.headers["Retry-After"]) <= 86400
        usage = http.get("/api/v1/usage").json()
        (quota,) = usage["quotas"]
        assert quota["spent"]["model_calls"] == 3
        assert quota["spent"]["runs"] == 3  # the refused one was not counted: it was refused first
        assert quota["limits"] == {"model_calls": 3}
        other = httpx.get(f"{server.url}/api/v1/usage", headers=auth("globex"), timeout=30).json()
        assert other["quotas"] == []  # another workspace's quota is not globex's


def test_a_schedule_s_runs_count_against_the_quota(tmp_path) -> None:
    """A scheduled run is admitted as any run: counted, and refused (429) once the runs quota is spent."""
    limits = "    - {workspace: acme, period: day, runs: 1}\n"
    config = write_platform_config(tmp_path, f"file:{tmp_path}/store", FAST_RUNS + _quota(limits))
    schedule = {"id": "daily", "agent": "chat", "cron": "0 7 * * *", "paused": True}
    with Server(config) as server, httpx.Client(base_url=server.url, headers=auth(), timeout=60) as http:
        assert http.post("/api/v1/schedules", json=schedule).status_code == 201
        assert http.post("/api/v1/schedules/daily/run").status_code == 202
        refused = http.post("/api/v1/schedules/daily/run")
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "quota_exceeded"
        (quota,) = http.get("/api/v1/usage").json()["quotas"]
        assert quota["spent"]["runs"] == 1


def test_a_pipeline_meeting_a_quota_mid_way_is_saved_interrupted_with_the_reason(tmp_path) -> None:
    limits = "    - {workspace: acme, period: month, model_calls: 2}\n"
    config = write_platform_config(tmp_path, f"file:{tmp_path}/store", FAST_RUNS + _quota(limits))
    with Server(config) as server, httpx.Client(base_url=server.url, headers=auth(), timeout=60) as http:
        answer = http.post("/api/v1/agents/steps/invoke", json={"input": "go", "session_id": "p1"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "interrupted"
        run = http.get(f"/api/v1/runs/{answer.json()['run_id']}").json()
        assert run["status"] == "interrupted"
        detail = http.get("/api/v1/agents/steps/sessions/p1").json()["run"]
        assert "QuotaExceeded" in json.dumps(detail)
        assert [n for n, v in run["nodes"].items() if v.get("status") == "completed"] == ["one", "two"]


def test_requests_per_second_per_caller(tmp_path) -> None:
    extra = "quotas: {requests_per_s: 0.001, burst: 3}\n"
    config = write_platform_config(tmp_path, f"file:{tmp_path}/store", FAST_RUNS + extra)
    with Server(config) as server:
        codes = [
            httpx.get(f"{server.url}/api/v1/agents", headers=auth(), timeout=30).status_code for _ in range(5)
        ]
        assert codes == [200, 200, 200, 429, 429]
        # another caller has a bucket of its own
        assert httpx.get(f"{server.url}/api/v1/agents", headers=auth("globex"), timeout=30).status_code == 200


QUOTA_TOKENS = 400
CLIENTS = 6


def test_three_servers_hold_a_token_quota_with_one_killed(tmp_path, monkeypatch) -> None:
    """Clients send turns (no session: each call the same size) to three servers on one SQLite database
    until every server refuses with 429; the first server is SIGKILLed half way. The counter never passes
    the quota by more than the calls in flight (at most one per client), and every call is counted once:
    the counter's tokens are its calls times one call's tokens, its calls at most those the model made."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "0.3")  # calls overlap: the kill finds some in flight
    database = tmp_path / "server.db"
    limits = f"    - {{workspace: acme, period: day, tokens: {QUOTA_TOKENS}}}\n"
    config = counted_config(tmp_path, f"sqlite:{database}", FAST_RUNS + _quota(limits))
    ports = [free_port() for _ in range(3)]
    servers = [start_server(config, port) for port in ports]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    alive = list(urls)
    answered: list[int] = []  # each answered call's tokens

    async def client(index: int, http: httpx.AsyncClient) -> None:
        rng = random.Random(index)
        turn = 0
        while alive:
            url = rng.choice(alive)
            try:
                reply = await http.post(
                    f"{url}/api/v1/agents/counted/invoke", json={"input": f"slow c{index:02d} t{turn:03d}"}
                )
            except httpx.TransportError:
                continue  # the killed server: another one
            if reply.status_code == 429:
                assert reply.json()["error"]["code"] == "quota_exceeded"
                return
            if reply.status_code == 200:
                answered.append(
                    sum(reply.json()["usage"].get(k, 0) for k in ("input_tokens", "output_tokens"))
                )
            turn += 1
            if index == 0 and turn == 3 and urls[0] in alive:
                servers[0].send_signal(signal.SIGKILL)  # mid-load: its calls in flight die with it
                alive.remove(urls[0])

    async def drive() -> None:
        async with httpx.AsyncClient(headers=auth(), timeout=60) as http, anyio.create_task_group() as group:
            for index in range(CLIENTS):
                group.start_soon(client, index, http)

    try:
        anyio.run(drive)
    finally:
        for process in servers:
            if process.poll() is None:
                process.terminate()
                process.wait(20)
            process.stderr.close()
    per_call = answered[0]
    assert set(answered) == {per_call}  # every call the same size: the bound is in calls
    with sqlite3.connect(database) as db:
        rows = [
            json.loads(value)
            for key, value in db.execute("SELECT key, data FROM orchestra_storage").fetchall()
            if "/quota/" in key
        ]
    (counter,) = rows
    made = len(calls.read_text().splitlines())
    assert counter["tokens"] == counter["model_calls"] * per_call  # nothing counted twice, nothing partial
    assert counter["model_calls"] <= made  # never more than the model made
    assert counter["model_calls"] >= len(answered)  # every answered call was counted before its answer
    assert counter["tokens"] >= QUOTA_TOKENS  # it ran until the quota was spent
    assert counter["tokens"] <= QUOTA_TOKENS + CLIENTS * per_call  # the bound: the calls in flight
