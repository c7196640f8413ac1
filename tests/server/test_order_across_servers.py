"""A session's runs across ``orchestra serve`` processes on one storage (local files, SQLite, PostgreSQL):

- ``enqueue`` means the order in which messages arrived, on one server or many, and each message's turn
  runs once (double texting through a load balancer without session affinity);
- a background run is started once: a live server never takes a run over from itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import httpx
import pytest

from tests.server.conftest import auth, counted_config
from tests.server.test_platform_processes import Servers, final_record, read_events, wait_for

STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"
BACKGROUND_RUNS = 200 if STRESS else 60


@pytest.fixture(params=["file", "sqlite", "postgres"])
def storage_uri(request, tmp_path) -> str:
    if request.param == "file":
        return f"file:{tmp_path}/store"
    if request.param == "sqlite":
        return f"sqlite:{tmp_path}/store.db"
    return f"'{request.getfixturevalue('postgres_uri')}'"


@pytest.fixture
def servers():
    made: list[Servers] = []

    def make(config: Path, **env: str) -> Servers:
        made.append(Servers(config, env))
        return made[-1]

    yield make
    for group in made:
        group.close()


def calls_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_an_enqueue_message_to_a_second_server_runs_after_the_first(storage_uri, tmp_path, servers):
    # x1 goes to server A and its model takes 2 s; x2 goes to server B while x1 runs. Enqueue: x2 waits
    # for x1, and x1's model runs once (it used to lose its session to B's write and run again, after x2).
    calls = tmp_path / "calls.txt"
    runs = "runs: {heartbeat_s: 0.2, server_gone_after_s: 10, poll_s: 0.05, sweep_s: 0.3}\n"
    group = servers(
        counted_config(tmp_path, storage_uri, runs, on_busy="enqueue"),
        ORCHESTRA_TEST_CALLS=str(calls),
        ORCHESTRA_TEST_DELAY="2",
    )
    first, second = group.start(), group.start()
    answers: dict[str, httpx.Response] = {}

    async def double_text() -> None:
        async with httpx.AsyncClient(headers=auth(), timeout=120) as http:

            async def send(url: str, text: str) -> None:
                body = {"input": text, "session_id": "dt"}
                answers[text] = await http.post(f"{url}/api/v1/agents/counted/invoke", json=body)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(send, first, "slow x1")
                await anyio.to_thread.run_sync(wait_for, lambda: calls_of(calls) == ["slow x1"])
                tasks.start_soon(send, second, "x2")

    anyio.run(double_text)
    assert answers["slow x1"].status_code == 200, answers["slow x1"].text
    assert answers["x2"].status_code == 200, answers["x2"].text
    assert answers["slow x1"].json()["output"] == "echo: slow x1 (turn 1)"
    assert answers["x2"].json()["output"] == "echo: x2 (turn 2)"  # it saw x1's turn
    session = httpx.get(f"{second}/api/v1/agents/counted/sessions/dt", headers=auth(), timeout=30).json()
    texts = [b["text"] for m in session["messages"] for b in m["content"] if "text" in b]
    assert texts == ["slow x1", "echo: slow x1 (turn 1)", "x2", "echo: x2 (turn 2)"]
    assert calls_of(calls) == ["slow x1", "x2"]  # each message's model call ran once, in order


def test_a_live_server_starts_each_background_run_once(tmp_path, servers, postgres_uri):
    # A fast sweep on PostgreSQL: a server's sweep used to find a run its start had not yet put into the
    # session's busy document, queue it again and start it a second time ("attempt 2" from the same
    # server, its model run twice) while the first start ran it.
    calls = tmp_path / "calls.txt"
    runs = "runs: {heartbeat_s: 0.2, server_gone_after_s: 10, poll_s: 0.05, sweep_s: 0.01}\n"
    group = servers(
        counted_config(tmp_path, f"'{postgres_uri}'", runs, on_busy="enqueue"),
        ORCHESTRA_TEST_CALLS=str(calls),
    )
    url = group.start()
    started: list[str] = []

    async def start_all() -> None:
        # A few clients, each starting runs one after another: few runs are active at a time, so the
        # sweep goes over them often.
        async with httpx.AsyncClient(headers=auth(), timeout=120) as http:

            async def client(first: int) -> None:
                for index in range(first, BACKGROUND_RUNS, 4):
                    body = {"input": f"b{index}", "session_id": f"bg{index}"}
                    answer = await http.post(f"{url}/api/v1/agents/counted/runs", json=body)
                    assert answer.status_code == 202, answer.text
                    started.append(answer.json()["run_id"])

            async with anyio.create_task_group() as tasks:
                for first in range(4):
                    tasks.start_soon(client, first)

    anyio.run(start_all)
    for run_id in started:
        record = final_record(url, run_id)
        assert (record["status"], record["attempt"]) == ("completed", 1), record
        starts = [
            e["data"]
            for e in read_events(url, run_id)
            if e["event"] == "status" and e["data"]["status"] == "executing"
        ]
        assert [s.get("attempt") for s in starts] == [1], (run_id, starts)
    assert sorted(calls_of(calls)) == sorted(f"b{i}" for i in range(BACKGROUND_RUNS))  # each model call once
