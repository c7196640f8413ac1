"""SQLite and PostgreSQL give the proofs every storage gives: a second writer in another process is
refused, a writer SIGKILLed mid-save leaves a session that loads to a whole turn, values encrypted with
EncryptedStorage never reach the database in clear, and ``orchestra sessions ...`` works on them.
(The graph and swarm kill tests run on both in tests/multiagent/test_kill.py; three servers on one
PostgreSQL, one SIGKILLed, in tests/server/test_killed_servers.py; random fault schedules in
tests/session/test_fault_schedules.py.)"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import anyio
import pytest
from typer.testing import CliRunner

from orchestra import Agent
from orchestra.cli import app
from orchestra.errors import SessionConflictError
from orchestra.session import SnapshotSessionManager
from orchestra.storage import EncryptedStorage, EnvKeyProvider, storage_from_uri
from orchestra.testing import ScriptedModel
from tests.cli.pipelines import AGENT, CHAIN
from tests.session.test_faults import check_consistent

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path):
    """A storage URI: an SQLite file, or a fresh schema on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path}/sessions.db"
    return request.getfixturevalue("postgres_uri")


def texts(agent):
    return [m["content"][0]["text"] for m in agent.messages]


CHILD = textwrap.dedent(
    """
    import sys
    from orchestra import Agent, ScriptedModel
    from orchestra.session import SnapshotSessionManager
    from orchestra.storage import storage_from_uri

    storage = storage_from_uri(sys.argv[1])
    agent = Agent(model=ScriptedModel(["child reply"]), session_manager=SnapshotSessionManager("shared", storage=storage))
    agent("from the child process")
    """
)


def test_a_writer_in_another_process_is_refused(database):
    storage = storage_from_uri(database)
    parent = Agent(
        model=ScriptedModel(["one", "two"]), session_manager=SnapshotSessionManager("shared", storage=storage)
    )
    parent("from the parent")
    subprocess.run([sys.executable, "-c", CHILD, database], check=True, timeout=60, env=ENV)
    with pytest.raises(SessionConflictError):
        parent("the parent is stale now")
    again = Agent(model=ScriptedModel([]), session_manager=SnapshotSessionManager("shared", storage=storage))
    assert texts(again) == ["from the parent", "one", "from the child process", "child reply"]


WRITER = textwrap.dedent(
    """
    import sys
    from orchestra import Agent, ScriptedModel
    from orchestra.conversation import NullConversationManager
    from orchestra.session import Compaction, SnapshotSessionManager
    from orchestra.storage import storage_from_uri

    uri, start = sys.argv[1], int(sys.argv[2])
    manager = SnapshotSessionManager(
        "kill", storage=storage_from_uri(uri), save_latest_on="message",
        compaction=Compaction(min_bytes=2000, ratio=2.0, max_records=40),
    )
    agent = Agent(model=ScriptedModel([f"a{i}" for i in range(start, start + 100000)]),
                  conversation_manager=NullConversationManager(), session_manager=manager)
    print("ready", flush=True)
    i = len(agent.messages) // 2
    while True:
        agent.state.set("turn", i)
        agent(f"u{i}" + "x" * 200)
        print(i, flush=True)
        i += 1
    """
)


def test_a_writer_killed_mid_save_leaves_a_session_that_loads_whole(database):
    """SIGKILL a process that saves every message, at random moments; each time the session loads to a
    state the writer had, with every turn it finished before the kill."""
    rounds = int(os.environ.get("ORCHESTRA_KILL_ROUNDS", "30" if os.environ.get("ORCHESTRA_STRESS") else "6"))
    rng = random.Random(25)
    storage = storage_from_uri(database)
    finished = -1
    for _ in range(rounds):
        agent = Agent(
            model=ScriptedModel([]), session_manager=SnapshotSessionManager("kill", storage=storage)
        )
        check_consistent(agent.messages, agent.state)
        assert len(agent.messages) // 2 >= finished + 1  # every turn the writer finished is there
        start = len(agent.messages) // 2
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, database, str(start)], stdout=subprocess.PIPE, env=ENV
        )
        assert child.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + rng.uniform(0.0, 0.3)
        for line in child.stdout:
            finished = int(line)
            if time.monotonic() > deadline:
                break
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    final = Agent(model=ScriptedModel([]), session_manager=SnapshotSessionManager("kill", storage=storage))
    check_consistent(final.messages, final.state)
    assert len(final.messages) // 2 >= finished + 1
    assert len(final.messages) > rounds


def test_encrypted_sessions_never_reach_the_database_in_clear(database, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_ENCRYPTION_KEYS", f"k1={base64.b64encode(os.urandom(32)).decode()}")
    storage = EncryptedStorage(storage_from_uri(database), EnvKeyProvider())
    agent = Agent(
        model=ScriptedModel(["noted"]), session_manager=SnapshotSessionManager("s1", storage=storage)
    )
    agent("my passport number is X1234567")
    if database.startswith("sqlite:"):
        conn = sqlite3.connect(database.removeprefix("sqlite:"))
        rows = conn.execute("SELECT key, data FROM orchestra_storage").fetchall()
        conn.close()
    else:
        import psycopg

        with psycopg.connect(database) as conn:
            rows = conn.execute("SELECT key, data FROM orchestra_storage").fetchall()
    assert rows
    assert all(bytes(data).startswith(b"ORCHENC1") for _, data in rows)
    assert not [key for key, data in rows if b"X1234567" in bytes(data)]
    again = Agent(model=ScriptedModel([]), session_manager=SnapshotSessionManager("s1", storage=storage))
    assert again.messages == agent.messages


def test_sessions_commands_work_on_a_database(database, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0")
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args])

    (tmp_path / "chain.yaml").write_text(CHAIN)
    (tmp_path / "agent.yaml").write_text(AGENT)
    assert invoke("run", "chain.yaml", "--session-id", "one", "--storage", database).exit_code == 0
    ran = invoke("run", "agent.yaml", "--input", "hi", "--session-id", "two", "--storage", database)
    assert ran.exit_code == 0, ran.output
    assert not (tmp_path / ".orchestra").exists()  # nothing went to the default storage

    listed = invoke("sessions", "list", "--json", "--storage", database)
    assert listed.exit_code == 0, listed.output
    assert {s["session_id"] for s in json.loads(listed.stdout)} == {"one", "two"}
    shown = invoke("sessions", "show", "one", "--storage", database)
    assert "status: completed" in shown.stdout
    exported = invoke("sessions", "export", "two", "-o", tmp_path / "two.json", "--storage", database)
    assert exported.exit_code == 0, exported.output
    data = json.loads((tmp_path / "two.json").read_text())["data"]
    assert data["messages"][1]["content"][0]["text"] == "hello from the agent"
    assert (
        invoke(
            "sessions", "import", tmp_path / "two.json", "--session-id", "copy", "--storage", database
        ).exit_code
        == 0
    )
    history = invoke("sessions", "history", "one", "--scope", "multiAgent/chain", "--storage", database)
    assert history.exit_code == 0, history.output
    assert invoke("sessions", "compact", "one", "--storage", database).exit_code == 0
    assert invoke("sessions", "delete", "two", "--yes", "--force", "--storage", database).exit_code == 0
    after = {
        s["session_id"]
        for s in json.loads(invoke("sessions", "list", "--json", "--storage", database).stdout)
    }
    assert after == {"one", "copy"}

    async def left():
        storage = storage_from_uri(database)
        return [(key, (await storage.read(key))[0]) for key in await storage.list("session/two/")]

    # Deleted from the database itself: what is left are tombstones, holding nothing of it.
    for key, data in anyio.run(left):
        assert "/journal/" in key
        assert set(json.loads(data)) == {"t", "deleted"}
