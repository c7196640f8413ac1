"""Corrupt, truncated and unknown snapshots; processes killed mid-save; S3 faults."""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from orchestra import Agent
from orchestra.errors import SnapshotError, StorageUnavailableError
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage, S3Storage
from orchestra.testing import ScriptedModel
from tests.faults import FaultyProxy
from tests.journal_files import is_segment

BASE = "session/s1/scopes/agent/default/"
LATEST = BASE + "snapshots/snapshot_latest.json"


def agent_on(storage, replies=("a", "b", "c")):
    return Agent(
        model=ScriptedModel(list(replies)), session_manager=SnapshotSessionManager("s1", storage=storage)
    )


async def saved_session(storage):
    agent = agent_on(storage)
    await agent.invoke_async("hello")
    return agent


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b'{"scope": "agent", "schema_version": 1, "data": {"messa', "not valid JSON"),
        (b"\x00\xff garbage", "not valid JSON"),
        (b'{"scope": "agent", "schema_version": 99, "data": {}}', "schema_version 99 was written by a newer"),
        (b'{"scope": "galaxy", "schema_version": 1}', "not a valid Snapshot"),
        (b"[1, 2, 3]", "not a valid Snapshot"),
    ],
)
async def test_a_bad_latest_snapshot_is_refused_naming_the_key(storage, payload, problem):
    await saved_session(storage)
    await storage.write(LATEST, payload)
    with pytest.raises(SnapshotError, match=problem) as info:
        agent_on(storage)
    assert LATEST in str(info.value)
    assert (await storage.read(LATEST))[0] == payload  # nothing overwritten


async def test_a_truncated_journal_record_is_refused(storage):
    agent = await saved_session(storage)
    await agent.invoke_async("again")
    keys = list(await storage.list(BASE + "journal/"))
    data, _ = await storage.read(keys[-1])
    if is_segment(data):
        # Local files: the records are the lines of one segment. A record cut short at its very end is
        # what a writer killed mid-append leaves (tests/session/test_segments.py); one that others follow
        # is damage: cut record 1 of 0-2.
        lines = data.split(b"\n")
        lines[1] = lines[1][: len(lines[1]) // 2]
        damaged = b"\n".join(lines)
    else:
        damaged = data[: len(data) // 2]
    await storage.write(keys[-1], damaged)
    with pytest.raises(SnapshotError, match=keys[-1]):
        agent_on(storage)
    assert (await storage.read(keys[-1]))[0] == damaged


async def test_a_missing_journal_record_is_refused(storage):
    agent = await saved_session(storage)
    await agent.invoke_async("again")
    keys = await storage.list(BASE + "journal/")
    data, _ = await storage.read(keys[0])
    if is_segment(data):  # local files: take record 1's line out of the segment of records 0-2
        lines = data.split(b"\n")
        await storage.write(keys[0], b"\n".join([lines[0], *lines[2:]]))
    else:
        await storage.delete(keys[1])
    with pytest.raises(SnapshotError, match="journal record missing"):
        agent_on(storage)


async def test_s3_faults_are_retried_and_then_reported_with_nothing_lost(moto_url, s3_bucket):
    with FaultyProxy(moto_url) as proxy:
        storage = S3Storage(s3_bucket, endpoint_url=proxy.url, max_attempts=3)
        agent = agent_on(storage, replies=("a", "b", "c"))
        proxy.fail_next(2, 500)
        await agent.invoke_async("survives two 500s")
        proxy.fail_next(3, 503)
        with pytest.raises(StorageUnavailableError, match="failed after every retry") as failed:
            await agent.invoke_async("this save fails")
        # the error says nothing was stored, and the turn was rolled back in memory too
        assert failed.value.stored is False
        assert "journal record" in str(failed.value)
        assert "'s1'" in str(failed.value)
        assert [m["content"][0]["text"] for m in agent.messages] == ["survives two 500s", "a"]
        # once S3 is back, saving again stores nothing of the failed turn, and a retry stores it once
        await agent.session_manager.save_snapshot(agent)
        await agent.invoke_async("this save fails")
    restored = agent_on(S3Storage(s3_bucket, endpoint_url=moto_url))
    texts = [m["content"][0]["text"] for m in restored.messages]
    assert texts == ["survives two 500s", "a", "this save fails", "c"]


WRITER = textwrap.dedent(
    """
    import sys
    from orchestra import Agent, ScriptedModel
    from orchestra.conversation import NullConversationManager
    from orchestra.session import Compaction, SnapshotSessionManager
    from orchestra.storage import LocalFileStorage

    root, start = sys.argv[1], int(sys.argv[2])
    manager = SnapshotSessionManager(
        "kill", storage=LocalFileStorage(root), save_latest_on="message",
        compaction=Compaction(min_bytes=2000, ratio=2.0, max_records=40),
    )
    agent = Agent(model=ScriptedModel([f"a{i}" for i in range(start, start + 100000)]),
                  conversation_manager=NullConversationManager(), session_manager=manager)
    # whole turns, and at most the prompt of a turn the kill cut short, which the next call resumes
    assert not agent.messages or agent.messages[-1]["role"] == "assistant" or agent.open_turn() is not None
    print("ready", flush=True)
    i = len(agent.messages) // 2
    while True:
        agent.state.set("turn", i)
        agent(f"u{i}" + "x" * 200)
        i += 1
    """
)


def check_consistent(messages, state):
    """A loaded session must be a state the writer had at some save: u0,a0,u1,a1,..., and perhaps the
    prompt of a turn the kill cut after it was saved (kept open, for the next call to resume; the writer
    sends that same prompt, so it resumes the turn). The agent state the writer set for that turn stays.
    """
    texts = [m["content"][0]["text"] for m in messages]
    if len(texts) % 2 == 1:
        texts = texts[:-1]  # the open turn's prompt, checked below with the whole turns before it
        assert messages[-1]["content"][0]["text"] == f"u{len(texts) // 2}" + "x" * 200
    for index, text in enumerate(texts):
        turn = index // 2
        expected = f"u{turn}" if index % 2 == 0 else f"a{turn}"
        assert text.startswith(expected), texts[-4:]
        assert index % 2 == 1 or text == expected + "x" * 200, texts[-4:]
    assert len(texts) % 2 == 0, texts[-4:]
    turns = len(texts) // 2
    assert state.get("turn") in (None, turns - 1, turns), (state, len(texts))


def test_killed_mid_save_always_leaves_a_loadable_session(tmp_path):
    rounds = int(
        os.environ.get("ORCHESTRA_KILL_ROUNDS", "200" if os.environ.get("ORCHESTRA_STRESS") else "50")
    )
    rng = random.Random(1234)
    root = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(rounds):
        storage = LocalFileStorage(root)
        agent = Agent(
            model=ScriptedModel([]), session_manager=SnapshotSessionManager("kill", storage=storage)
        )
        check_consistent(agent.messages, agent.state)
        start = len(agent.messages) // 2
        del agent
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), str(start)], stdout=subprocess.PIPE, env=env
        )
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, 0.05))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    final = Agent(
        model=ScriptedModel([]),
        session_manager=SnapshotSessionManager("kill", storage=LocalFileStorage(root)),
    )
    check_consistent(final.messages, final.state)
    assert len(final.messages) > rounds  # the writers made progress across the kills
    journal = json.loads(
        (root / "session/kill/scopes/agent/default/snapshots/snapshot_latest.json").read_text()
    )
    assert journal["journal"]["seq"] > 0  # compaction happened along the way, and survived the kills
