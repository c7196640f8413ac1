"""The server never contradicts itself: answers by error type, Idempotency-Key, runs settled from their
sessions, and no exception reaching uvicorn (issue 24), over real HTTP."""

from __future__ import annotations

import http.client
import json
import logging

import anyio
import httpx
import pytest

from orchestra.client import AsyncClient, InsufficientStorageError
from orchestra.hosting import Invocation, RunService
from orchestra.server import load_config
from orchestra.storage import LocalFileStorage
from orchestra.testing import FaultyStorage
from tests.server.conftest import KEYS, Server, auth, write_config

INVOKE = "/api/v1/agents/chat/invoke"


def faulty(running: Server) -> FaultyStorage:
    """Put a FaultyStorage under the running server's sessions and run records."""
    runtime = running.app.state.runtime
    runtime.root = FaultyStorage(runtime.root)
    return runtime.root


def turns(*prompts: str) -> list[str]:
    """A session's texts after these turns, each answered once by tests.support:echo_reply."""
    return [text for i, p in enumerate(prompts) for text in (p, f"echo: {p} (turn {i + 1})")]


async def session_texts(http: httpx.AsyncClient, session_id: str) -> list[str]:
    answer = await http.get(f"/api/v1/agents/chat/sessions/{session_id}")
    return [m["content"][0]["text"] for m in answer.json()["messages"]]


@pytest.fixture
def running(tmp_path):
    config = write_config(tmp_path, f"file:{tmp_path}/store")
    with Server(config) as server:
        yield server


async def test_a_full_disk_answers_507_as_json_and_stores_nothing(running):
    storage = faulty(running)
    async with httpx.AsyncClient(base_url=running.url, headers=auth()) as http:
        assert (await http.post(INVOKE, json={"input": "one", "session_id": "s1"})).status_code == 200
        storage.fail("write", "/journal/", kind="full")
        full = await http.post(INVOKE, json={"input": "two", "session_id": "s1"})
        assert full.status_code == 507
        assert full.json()["error"]["code"] == "storage_full"
        assert "not stored" in full.json()["error"]["message"]
        assert await session_texts(http, "s1") == turns("one")
        # The failed run is recorded as such; a retry (without a key) stores the turn once.
        again = await http.post(INVOKE, json={"input": "two", "session_id": "s1"})
        assert again.status_code == 200
        assert await session_texts(http, "s1") == turns("one", "two")


@pytest.mark.parametrize(
    ("kind", "after", "status", "code"),
    [
        ("unavailable", False, 503, "storage_unavailable"),
        ("reset", False, 503, "outcome_unknown"),
        ("full", True, 503, "outcome_unknown"),
    ],
)
async def test_storage_failures_are_answered_by_their_type(running, kind, after, status, code):
    storage = faulty(running)
    async with httpx.AsyncClient(base_url=running.url, headers=auth()) as http:
        await http.post(INVOKE, json={"input": "one", "session_id": "s1"})
        storage.fail("write", "/journal/000000000002", kind=kind, after=after)
        if code == "outcome_unknown":
            # A read back cannot tell either (the first read of that record is the kept agent's check,
            # before its turn, that nothing follows its last record).
            storage.fail("read", "/journal/000000000002", nth=2)
        answer = await http.post(INVOKE, json={"input": "two", "session_id": "s1"})
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]["code"] == code
        assert answer.headers["retry-after"] == "1"


async def test_a_repeated_idempotency_key_is_answered_from_the_first_run(running):
    async with httpx.AsyncClient(base_url=running.url, headers=auth()) as http:
        body = {"input": "pay once", "session_id": "s1"}
        first = await http.post(INVOKE, json=body, headers={"Idempotency-Key": "k-1"})
        again = await http.post(INVOKE, json=body, headers={"Idempotency-Key": "k-1"})
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true"
        assert await session_texts(http, "s1") == turns("pay once")
        other = await http.post(
            INVOKE, json={"input": "something else", "session_id": "s1"}, headers={"Idempotency-Key": "k-1"}
        )
        assert other.status_code == 422
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        bad = await http.post(INVOKE, json=body, headers={"Idempotency-Key": "k" * 300})
        assert bad.status_code == 422
        assert bad.json()["error"]["code"] == "invalid_idempotency_key"


async def test_concurrent_repeats_of_one_key_run_the_turn_once(running):
    async with httpx.AsyncClient(base_url=running.url, headers=auth(), timeout=30) as http:
        body = {"input": "once", "session_id": "s1"}
        answers = []

        async def send() -> None:
            answers.append(await http.post(INVOKE, json=body, headers={"Idempotency-Key": "same"}))

        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(send)
        assert {a.status_code for a in answers} == {200}
        assert len({a.json()["run_id"] for a in answers}) == 1
        assert await session_texts(http, "s1") == turns("once")


async def test_a_key_whose_first_run_stored_nothing_runs_again(running):
    storage = faulty(running)
    async with httpx.AsyncClient(base_url=running.url, headers=auth()) as http:
        body = {"input": "retry me", "session_id": "s1"}
        storage.fail("write", "/journal/", kind="full")
        first = await http.post(INVOKE, json=body, headers={"Idempotency-Key": "k"})
        assert first.status_code == 507
        again = await http.post(INVOKE, json=body, headers={"Idempotency-Key": "k"})
        assert again.status_code == 200
        assert again.json()["run_id"] != first.json()["error"]["message"]
        assert await session_texts(http, "s1") == turns("retry me")


async def test_the_client_retries_a_lost_answer_with_its_key_and_the_turn_is_stored_once(running):
    """The record is written, the storage loses the answer and cannot read it back: the server answers
    503 outcome_unknown; the client repeats with the same key, and the server settles the first run from
    the session (its record is there) and answers from it."""
    storage = faulty(running)
    async with AsyncClient(running.url, KEYS["acme"]) as client:
        await client.invoke("chat", "one", session_id="s1")
        storage.fail("write", "/journal/000000000002", after=True)
        storage.fail("read", "/journal/000000000002")  # the read back: the server cannot tell
        result = await client.invoke("chat", "two", session_id="s1")
        assert result.output == "echo: two (turn 2)"
        session = await client.session("chat", "s1")
        assert [m["content"][0]["text"] for m in session["messages"]] == turns("one", "two")
        storage.fail("write", "/journal/", kind="full")
        with pytest.raises(InsufficientStorageError, match="storage_full"):
            await client.invoke("chat", "three", session_id="s1")


async def test_a_5xx_never_reaches_uvicorn_and_the_connection_stays_usable(running, caplog):
    storage = faulty(running)
    connection = http.client.HTTPConnection(
        "127.0.0.1", running.port, timeout=10
    )  # one kept-alive connection
    headers = {**auth(), "Content-Type": "application/json"}

    def call(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
        connection.request(method, url, body=json.dumps(body) if body else None, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())

    def bug(operation: str, key: str) -> Exception:
        return RuntimeError("a bug, not a storage error")

    with caplog.at_level(logging.ERROR):
        assert call("POST", INVOKE, {"input": "one", "session_id": "s1"})[0] == 200
        storage.fail("write", "/journal/", kind="full")
        assert call("POST", INVOKE, {"input": "two", "session_id": "s1"})[0] == 507
        storage.fail("list", "session/").error = bug  # type: ignore[method-assign]
        status, body = await anyio.to_thread.run_sync(call, "GET", "/api/v1/agents/chat/sessions")
        assert (status, body["error"]["code"]) == (500, "internal")
        status, body = await anyio.to_thread.run_sync(
            call, "POST", INVOKE, {"input": "three", "session_id": "s1"}
        )
        assert status == 200
        assert body["output"] == "echo: three (turn 2)"
    connection.close()
    assert not [r for r in caplog.records if "Exception in ASGI application" in r.getMessage()]
    assert [r for r in caplog.records if r.getMessage() == "internal_error"]  # logged once, by us


async def test_a_run_left_executing_by_a_stopped_server_is_settled_from_the_session(tmp_path):
    """A server stores the turn, then stops before writing the final record: the record stays
    "executing" (never a stored turn without one). Another server settles it from the session when it is
    read, and answers a repeat of its Idempotency-Key from it."""
    config = load_config(write_config(tmp_path, f"file:{tmp_path}/store"))
    stopped = RunService(config)  # never flushed: as if killed right after the answer
    hosted = next(h for h in config.agents if h.id == "chat")
    turn = Invocation(hosted, "remember me", "s1", None)
    turn.idempotency_key, turn.fingerprint = "k", "f"
    record, failure = await stopped.invoke("acme", turn)
    assert failure is None
    assert record.status == "completed"

    other = RunService(config)
    executing = await other.runs("acme").get(record.run_id)
    assert executing.status == "executing"  # as stored...
    settled = await other.run_record("acme", record.run_id)  # ...but its server is gone
    assert (settled.status, settled.output, settled.stored) == (
        "completed",
        "echo: remember me (turn 1)",
        True,
    )
    assert "stopped" in settled.settled
    assert (await RunService(config).runs("acme").get(record.run_id)).status == "completed"  # written back

    repeat = Invocation(hosted, "remember me", "s1", None)
    repeat.idempotency_key, repeat.fingerprint = "k", "f"
    replayed, failure = await other.invoke("acme", repeat)
    assert failure is None
    assert replayed.run_id == record.run_id
    again = Invocation(hosted, "and now?", "s1", None)
    answered, _ = await other.invoke("acme", again)
    assert [m["content"][0]["text"] for m in answered.messages] == turns("remember me", "and now?")


async def test_a_stopped_servers_run_that_stored_nothing_settles_failed_and_its_key_runs_again(tmp_path):
    config = load_config(write_config(tmp_path, f"file:{tmp_path}/store"))
    hosted = next(h for h in config.agents if h.id == "chat")
    stopped = RunService(config)
    stopped.root = FaultyStorage(stopped.root)
    stopped.root.fail("write", "/journal/000000000001", kind="reset")  # refused, but the caller cannot
    stopped.root.fail("read", "/journal/000000000001")  # know; nor can the read back: outcome unknown
    turn = Invocation(hosted, "maybe", "s1", None)
    turn.idempotency_key, turn.fingerprint = "k", "f"
    record, failure = await stopped.invoke("acme", turn)
    assert failure.code == "outcome_unknown"
    assert record.stored is None
    await stopped.flush_records("acme")

    other = RunService(config)
    settled = await other.run_record("acme", record.run_id)
    assert (settled.status, settled.stored) == ("failed", False)  # nothing of it is in the session
    repeat = Invocation(hosted, "maybe", "s1", None)
    repeat.idempotency_key, repeat.fingerprint = "k", "f"
    answered, failure = await other.invoke("acme", repeat)
    assert failure is None
    assert answered.run_id != record.run_id
    assert [m["content"][0]["text"] for m in answered.messages] == turns("maybe")


async def test_a_real_full_disk_answers_507_never_500_or_502(tmp_path, small_disk, caplog):
    """A small tmpfs fills up under a real server: every answer is 200 or 507 JSON (and no traceback),
    every 200 stored once and every 507 not at all."""
    mount = small_disk("160k")
    with Server(write_config(tmp_path, f"file:{mount}")) as server:
        statuses = []
        with caplog.at_level(logging.ERROR):
            async with AsyncClient(server.url, KEYS["acme"], retries=0) as client:
                for i in range(60):
                    try:
                        await client.invoke("chat", f"{i}:" + "x" * 3000, session_id="full")
                        statuses.append(200)
                    except InsufficientStorageError:
                        statuses.append(507)
        assert 507 in statuses
        assert set(statuses) <= {200, 507}
        assert not [r for r in caplog.records if "Exception in ASGI application" in r.getMessage()]
    from orchestra.session._journal import Journal
    from orchestra.session._layout import ScopeLayout

    sessions = RunService(load_config(tmp_path / "server.yaml")).agent_storage("acme", "chat")
    doc = await Journal(sessions, ScopeLayout("full", "agent", "default")).load()
    assert len(doc.logs["messages"]) == 2 * statuses.count(200)


def test_local_storage_is_what_the_faulty_wrapper_wraps(tmp_path):
    # A FaultyStorage with no faults planned changes nothing (the other tests rely on it).
    storage = FaultyStorage(LocalFileStorage(tmp_path))
    anyio.run(storage.write, "a/b", b"x")
    assert anyio.run(storage.read, "a/b")[0] == b"x"
    assert storage.made == [("write", "a/b")]
