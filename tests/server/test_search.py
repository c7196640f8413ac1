"""Searching runs and sessions over the real server (issue 37 item 5), on local files, SQLite,
PostgreSQL and S3 (moto's server): filters by status, agent, time range and metadata; newest or oldest first; pages with a
cursor that see every item once; refusals that name what is wrong."""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest

from orchestra.hosting.search import run_time
from tests.server.conftest import Server, auth, write_config


@pytest.fixture(params=["file", "sqlite", "postgres", "s3"])
def searched(request, tmp_path):
    """A server with runs of three agents: chat runs for two customers (a, b) on six sessions, one run
    without metadata, and pipeline runs that stop interrupted."""
    if request.param == "file":
        storage = f"file:{tmp_path}/store"
    elif request.param == "sqlite":
        storage = f"sqlite:{tmp_path}/store.db"
    else:
        storage = f"'{request.getfixturevalue('postgres_uri')}'"
    with (
        Server(write_config(tmp_path, storage)) as server,
        httpx.Client(base_url=server.url, headers=auth(), timeout=30) as http,
    ):
        started: list[dict] = []
        for index in range(6):
            body = {
                "input": f"hello {index}",
                "session_id": f"s{index}",
                "metadata": {"customer": "a" if index % 2 == 0 else "b", "n": str(index)},
            }
            answer = http.post("/api/v1/agents/chat/invoke", json=body)
            assert answer.status_code == 200, answer.text
            started.append(answer.json())
        assert http.post("/api/v1/agents/chat/invoke", json={"input": "plain"}).status_code == 200
        for index in range(2):
            body = {"input": "x", "session_id": f"p{index}", "metadata": {"customer": "a"}}
            answer = http.post("/api/v1/agents/approval/invoke", json=body)
            assert answer.json()["status"] == "interrupted", answer.text
        yield http


def pages(http: httpx.Client, path: str, key: str, **params) -> list[list[dict]]:
    """Every page of a search, following next_cursor."""
    out, cursor = [], None
    while True:
        answer = http.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        out.append(answer.json()[key])
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            return out


def test_runs_filter_sort_and_page(searched):
    http = searched
    everything = http.get("/api/v1/runs").json()
    assert everything["next_cursor"] is None
    runs = everything["runs"]
    assert len(runs) == 9
    assert [r["started_at"] for r in runs] == sorted((r["started_at"] for r in runs), reverse=True)
    customer_a = http.get("/api/v1/runs", params={"metadata": "customer:a"}).json()["runs"]
    assert sorted(r["session_id"] for r in customer_a) == ["p0", "p1", "s0", "s2", "s4"]
    both = http.get("/api/v1/runs", params={"metadata": ["customer:a", "n:2"]}).json()["runs"]
    assert [r["session_id"] for r in both] == ["s2"]
    assert both[0]["metadata"] == {"customer": "a", "n": "2"}
    interrupted = http.get("/api/v1/runs", params={"status": "interrupted"}).json()["runs"]
    assert sorted(r["session_id"] for r in interrupted) == ["p0", "p1"]
    of_chat = http.get("/api/v1/runs", params={"agent_id": "chat", "status": ["completed", "failed"]}).json()
    assert len(of_chat["runs"]) == 7
    # Time range: from the fourth chat run on, and before it (a run's time is its UUIDv7 id's: when the
    # server took the request, to the millisecond; its started_at comes a little later).
    chat = sorted((r for r in runs if r["agent_id"] == "chat"), key=lambda r: r["run_id"])
    middle = run_time(chat[3]["run_id"]).isoformat()
    started = datetime.fromisoformat(chat[3]["started_at"])
    assert run_time(chat[3]["run_id"]) <= started < run_time(chat[4]["run_id"])
    since = http.get("/api/v1/runs", params={"agent_id": "chat", "since": middle}).json()["runs"]
    until = http.get("/api/v1/runs", params={"agent_id": "chat", "until": middle}).json()["runs"]
    assert {r["run_id"] for r in since} == {r["run_id"] for r in chat[3:]}
    assert {r["run_id"] for r in until} == {r["run_id"] for r in chat[:3]}
    # Pages: every run once, in order, whatever the page size; oldest first is the reverse.
    for size in (1, 2, 4):
        paged = pages(http, "/api/v1/runs", "runs", limit=size)
        assert all(len(page) <= size for page in paged)
        assert [r["run_id"] for page in paged for r in page] == [r["run_id"] for r in runs]
    oldest = pages(http, "/api/v1/runs", "runs", limit=2, order="oldest")
    assert [r["run_id"] for page in oldest for r in page] == [r["run_id"] for r in reversed(runs)]
    filtered = pages(http, "/api/v1/runs", "runs", limit=2, metadata="customer:b")
    assert [r["session_id"] for page in filtered for r in page] == ["s5", "s3", "s1"]


def test_sessions_filter_sort_and_page(searched):
    http = searched
    listed = http.get("/api/v1/sessions").json()
    names = [(s["agent_id"], s["session_id"]) for s in listed["sessions"]]
    assert sorted(names) == sorted(
        [("chat", f"s{i}") for i in range(6)] + [("approval", "p0"), ("approval", "p1")]
    )
    stamps = [s["updated_at"] for s in listed["sessions"]]
    assert stamps == sorted(stamps, reverse=True)
    waiting = http.get("/api/v1/sessions", params={"status": "interrupted"}).json()["sessions"]
    assert sorted(s["session_id"] for s in waiting) == ["p0", "p1"]
    of_b = http.get("/api/v1/sessions", params={"agent_id": "chat", "metadata": "customer:b"}).json()
    assert sorted(s["session_id"] for s in of_b["sessions"]) == ["s1", "s3", "s5"]
    assert all(s["status"] == "completed" and s["last_run_id"] for s in of_b["sessions"])
    paged = pages(http, "/api/v1/sessions", "sessions", limit=3)
    assert [(s["agent_id"], s["session_id"]) for page in paged for s in page] == names
    # A deleted session is not found any more, though its runs stay listed.
    assert http.delete("/api/v1/agents/chat/sessions/s1").status_code == 204
    after = http.get("/api/v1/sessions", params={"metadata": "customer:b"}).json()["sessions"]
    assert sorted(s["session_id"] for s in after) == ["s3", "s5"]


@pytest.mark.parametrize("searched", ["file"], indirect=True)  # the same on every storage
def test_bad_queries_are_refused_by_name(searched):
    http = searched
    for params, words in (({"status": "running"}, "status"), ({"since": "yesterday"}, "since")):
        for path in ("/api/v1/runs", "/api/v1/sessions"):
            answer = http.get(path, params=params)
            assert answer.status_code == 422, (path, params, answer.text)
            assert words in answer.text, answer.text
    # A bare key asks that it be there; any cursor text is a place in the order (no cursor is refused).
    with_n = http.get("/api/v1/runs", params={"metadata": "n"}).json()["runs"]
    assert sorted(r["session_id"] for r in with_n) == [f"s{i}" for i in range(6)]
    assert http.get("/api/v1/runs", params={"cursor": "~"}).json()["runs"] != []  # after every id: all
    assert http.get("/api/v1/runs", params={"cursor": "!"}).json() == {"runs": [], "next_cursor": None}
    # Another workspace sees none of these.
    other = http.get("/api/v1/runs", headers=auth("globex")).json()
    assert other == {"runs": [], "next_cursor": None}
