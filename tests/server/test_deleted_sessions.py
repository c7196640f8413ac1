"""A session deleted through one server is gone for every server on the storage (issue 35, item 2).

Each server keeps a session's agent in memory between turns. A delete made elsewhere (another server, or
``orchestra sessions delete``) must reach those kept agents before their next turn: the deleted
conversation never reaches a model again, and nothing is written on from it. ``echo_reply`` answers with
how many user turns its model was given, so a reply says what history the model saw."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.server.conftest import auth, write_platform_config
from tests.server.test_concurrency import ROOT
from tests.server.test_platform_processes import Servers

BACKENDS = ["files", "sqlite", "postgres", "s3"]


def storage_uri(backend: str, tmp_path, request) -> str:
    if backend == "files":
        return f"file:{tmp_path}/store"
    if backend == "sqlite":
        return f"sqlite:{tmp_path}/store.db"
    if backend == "postgres":
        return f"'{request.getfixturevalue('postgres_uri')}'"
    bucket, moto_url = request.getfixturevalue("s3_bucket"), request.getfixturevalue("moto_url")
    return f"s3://{bucket}/server?endpoint_url={moto_url}"


def say(url: str, text: str, session: str, agent: str = "chat") -> httpx.Response:
    return httpx.post(
        f"{url}/api/v1/agents/{agent}/invoke",
        json={"input": text, "session_id": session},
        headers=auth(),
        timeout=60,
    )


def users(url: str, session: str, agent: str = "chat") -> list[str] | None:
    """The user messages of a session as ``url`` reads it (None: no such session)."""
    reply = httpx.get(f"{url}/api/v1/agents/{agent}/sessions/{session}", headers=auth(), timeout=30)
    if reply.status_code == 404:
        return None
    assert reply.status_code == 200, reply.text
    return [m["content"][0]["text"] for m in reply.json()["messages"] if m["role"] == "user"]


def delete(url: str, session: str, agent: str = "chat") -> None:
    reply = httpx.delete(f"{url}/api/v1/agents/{agent}/sessions/{session}", headers=auth(), timeout=30)
    assert reply.status_code == 204, reply.text


@pytest.fixture
def pair(tmp_path, request):
    """Two ``orchestra serve`` processes on one storage (the backend the test is parametrized with)."""
    uri = storage_uri(request.node.callspec.params["backend"], tmp_path, request)
    group = Servers(write_platform_config(tmp_path, uri), {"ORCHESTRA_TEST_DELAY": "0.6"})
    try:
        yield group.start(), group.start()
    finally:
        group.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_deleted_through_another_server_never_reaches_a_model_again(backend, pair):
    a, b = pair
    assert say(a, "one", "s1").json()["output"] == "echo: one (turn 1)"
    assert say(a, "two", "s1").json()["output"] == "echo: two (turn 2)"
    delete(b, "s1")
    assert users(a, "s1") is None
    reply = say(a, "three", "s1")  # a's kept agent still holds "one" and "two"
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"] == "echo: three (turn 1)"  # a new session: its model saw one turn
    assert users(b, "s1") == ["three"]
    assert say(b, "four", "s1").json()["output"] == "echo: four (turn 2)"  # the id goes on being usable

    # A kept agent that another server's turn left behind is reached by the delete too.
    say(a, "one", "s2")
    assert say(b, "two", "s2").json()["output"] == "echo: two (turn 2)"
    delete(b, "s2")
    reply = say(a, "three", "s2")  # a's kept agent holds "one" only, and its record is deleted
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"] == "echo: three (turn 1)"
    assert users(a, "s2") == users(b, "s2") == ["three"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_delete_racing_a_turn_leaves_nothing_of_the_session(backend, pair):
    """The turn's model took the history before the delete (the delete came while it ran): its save
    meets the deletion, stores nothing and says so; or the delete came first, and the turn began a new
    session; or it came after the turn ended, and took the turn with it. Never the old history written
    on."""
    a, b = pair
    assert say(a, "one", "s1", "slow").json()["output"] == "echo: one (turn 1)"
    answers: list[httpx.Response] = []
    turn = threading.Thread(target=lambda: answers.append(say(a, "two", "s1", "slow")))
    turn.start()
    time.sleep(0.25)  # the slow model answers after 0.6 s: the delete lands while the turn runs (mostly)
    delete(b, "s1", "slow")
    turn.join()
    reply = answers[0]
    if reply.status_code == 409:
        assert reply.json()["error"]["code"] == "session_conflict", reply.text
        assert "deleted" in reply.json()["error"]["message"]
        assert users(a, "s1", "slow") is None
        assert users(b, "s1", "slow") is None
    else:  # the delete came before the turn took the session, or (a loaded machine) after it ended
        assert reply.status_code == 200, reply.text
        assert reply.json()["output"] in ("echo: two (turn 1)", "echo: two (turn 2)")
    kept = ["two"] if reply.status_code == 200 and reply.json()["output"].endswith("(turn 1)") else []
    reply = say(a, "three", "s1", "slow")
    assert reply.status_code == 200, reply.text
    assert users(b, "s1", "slow") == [*kept, "three"]


@pytest.mark.parametrize("backend", ["files", "s3"])  # (the CLI names a prefix by a file or s3 URI)
def test_a_session_deleted_from_the_cli_never_reaches_a_model_again(backend, pair, tmp_path, request):
    a, _ = pair
    say(a, "one", "s1")
    say(a, "two", "s1")
    uri = storage_uri(backend, tmp_path, request).replace("/server?", "/server/ws/acme/agents/chat?")
    if backend == "files":
        uri += "/ws/acme/agents/chat"
    command = "from orchestra.cli import main; main()"
    deleted = subprocess.run(
        [sys.executable, "-c", command, "sessions", "delete", "s1", "--yes", "--force", "--storage", uri],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert deleted.returncode == 0, deleted.stderr
    reply = say(a, "three", "s1")
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"] == "echo: three (turn 1)"
    assert users(a, "s1") == ["three"]


def stored_values(uri: str) -> list[tuple[str, bytes]]:
    """Every key of the storage at ``uri`` and its value (read through orchestra's storage API, so the
    same check holds on every backend)."""
    import anyio

    from orchestra.storage import read_many, storage_from_uri

    async def read_all() -> list[tuple[str, bytes]]:
        storage = storage_from_uri(uri.strip("'"))
        keys = await storage.list("")
        found = await read_many(storage, keys)
        return [(key, item[0]) for key, item in zip(keys, found, strict=True) if item is not None]

    return anyio.run(read_all)


@pytest.mark.parametrize("backend", ["files", "sqlite", "postgres"])
def test_a_deleted_sessions_runs_leave_nothing_behind(backend, pair, tmp_path, request):
    """A session's run records (its inputs and outputs), event logs, waits and inbox go with it: the
    conversation is not kept on in what the server wrote about its runs."""
    a, b = pair
    secret, kept = "card-4111-deleted", "card-5500-kept"
    first = say(a, secret, "s1")
    assert first.status_code == 200, first.text
    started = httpx.post(
        f"{a}/api/v1/agents/chat/runs", json={"input": f"{secret} again", "session_id": "s1"}, headers=auth()
    )
    assert started.status_code == 202, started.text
    background = started.json()["run_id"]
    deadline = time.monotonic() + 60
    while httpx.get(f"{a}/api/v1/runs/{background}", headers=auth()).json()["status"] != "completed":
        assert time.monotonic() < deadline, "the background run did not end"
        time.sleep(0.1)
    assert say(a, kept, "s2").status_code == 200
    uri = storage_uri(backend, tmp_path, request)
    assert any(secret.encode() in value for _, value in stored_values(uri))  # the check can see it

    delete(b, "s1")

    for url in (a, b):
        for run_id in (first.json()["run_id"], background):
            assert httpx.get(f"{url}/api/v1/runs/{run_id}", headers=auth()).status_code == 404
        listed = httpx.get(f"{url}/api/v1/runs", params={"session_id": "s1"}, headers=auth()).json()["runs"]
        assert listed == []
    left = [key for key, value in stored_values(uri) if secret.encode() in value]
    assert left == [], f"the deleted session's words are still stored under {left}"
    assert any(kept.encode() in value for _, value in stored_values(uri))  # another session's are not touched
