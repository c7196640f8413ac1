"""A hosted turn does not load its session again: the session's agent is kept between turns, bounded, and
never trusted further than the conditional writes prove (issue 25, point 5)."""

from __future__ import annotations

import pytest

from orchestra.hosting import Invocation, RunService
from orchestra.server import load_config
from orchestra.session import SnapshotSessionManager, admin
from orchestra.testing import CountingStorage
from tests.server.conftest import write_config


def runtime_on(tmp_path, limits: str = "") -> RunService:
    return RunService(load_config(write_config(tmp_path, f"file:{tmp_path}/store", limits)))


def turn(runtime: RunService, text: str, session: str = "s1") -> Invocation:
    hosted = next(h for h in runtime.config.agents if h.id == "chat")
    return Invocation(hosted, text, session, None)


def texts(record) -> list[str]:
    return [m["content"][0]["text"] for m in record.messages if m["role"] == "user"]


async def test_a_kept_session_is_not_loaded_again(tmp_path):
    runtime = runtime_on(tmp_path)
    runtime.root = counting = CountingStorage(runtime.root)
    await runtime.invoke("acme", turn(runtime, "one"))
    reads = counting.reads
    record, failure = await runtime.invoke("acme", turn(runtime, "two"))
    assert failure is None
    assert texts(record) == ["one", "two"]
    # The agent was kept: no snapshot, manifest or journal load; one read that finds no record after its
    # last one (nobody wrote or deleted the session since).
    assert counting.reads == reads + 1
    assert len(runtime.builder.sessions) == 1


async def test_a_session_another_process_saved_is_loaded_afresh_before_the_turn(tmp_path):
    first, other = runtime_on(tmp_path), runtime_on(tmp_path)
    await first.invoke("acme", turn(first, "one"))
    await other.invoke("acme", turn(other, "from the other process"))
    counting = first.root = CountingStorage(first.root)
    record, failure = await first.invoke("acme", turn(first, "two"))
    assert failure is None  # its kept agent was behind: seen before the turn (one read), then loaded
    assert texts(record) == ["one", "from the other process", "two"]
    assert record.output == "echo: two (turn 3)"  # the model was given the session as stored
    reads = counting.reads
    await first.invoke("acme", turn(first, "three"))
    assert counting.reads == reads + 1  # kept again: one read (the next record number), no load


async def test_a_session_deleted_by_another_process_never_reaches_the_model_again(tmp_path):
    first, other = runtime_on(tmp_path), runtime_on(tmp_path)
    await first.invoke("acme", turn(first, "one"))
    await first.invoke("acme", turn(first, "two"))
    assert await admin.delete_session(other.agent_storage("acme", "chat"), "s1") > 0
    record, failure = await first.invoke("acme", turn(first, "three"))
    assert failure is None
    assert texts(record) == ["three"]  # a new session, whole: not a journal with a hole in it
    assert record.output == "echo: three (turn 1)"


async def test_a_session_deleted_and_written_again_by_another_process_is_not_written_over(tmp_path):
    first, other = runtime_on(tmp_path), runtime_on(tmp_path)
    await first.invoke("acme", turn(first, "one"))
    await first.invoke("acme", turn(first, "two"))
    await admin.delete_session(other.agent_storage("acme", "chat"), "s1")
    await other.invoke("acme", turn(other, "x"))  # a new session, past the record numbers of the old one
    await other.invoke("acme", turn(other, "y"))
    record, failure = await first.invoke("acme", turn(first, "three"))
    assert failure is None
    assert texts(record) == ["x", "y", "three"]  # the new session: the kept agent's old one is gone
    record, failure = await other.invoke("acme", turn(other, "z"))
    assert failure is None
    assert texts(record) == ["x", "y", "three", "z"]


@pytest.mark.parametrize(
    ("limits", "kept"), [("limits: {cached_sessions: 2}", 2), ("limits: {cached_sessions: 0}", 0)]
)
async def test_the_cache_is_bounded(tmp_path, limits, kept):
    runtime = runtime_on(tmp_path, limits + "\n")
    for session in ("a", "b", "c"):
        await runtime.invoke("acme", turn(runtime, "hi", session))
    assert len(runtime.builder.sessions) == kept
    record, _ = await runtime.invoke("acme", turn(runtime, "back", "a"))  # evicted: loaded again, whole
    assert texts(record) == ["hi", "back"]


async def test_a_session_deleted_through_the_api_is_forgotten(tmp_path):
    runtime = runtime_on(tmp_path)
    await runtime.invoke("acme", turn(runtime, "one"))
    runtime.builder.sessions.forget("acme", "chat", "s1")
    assert len(runtime.builder.sessions) == 0


async def test_turns_that_keep_nothing_reuse_an_agent_put_back_as_built(tmp_path):
    """No-memory and stateless turns take an agent built before, reset to how it was built (history,
    state, its test model's script), instead of building one from the spec each time."""
    runtime = runtime_on(tmp_path)
    hosted = next(h for h in runtime.config.agents if h.id == "chat")
    first, _ = await runtime.invoke("acme", Invocation(hosted, "one", None, None))
    second, _ = await runtime.invoke("acme", Invocation(hosted, "two", None, None))
    assert texts(first) == ["one"]
    assert texts(second) == ["two"]  # nothing of the first turn
    assert second.output == "echo: two (turn 1)"
    stateless, _ = await runtime.invoke(
        "acme",
        Invocation(
            hosted, "three", None, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        ),
    )
    assert stateless.output == "echo: three (turn 2)"
    assert len(runtime.builder.fresh._idle["chat"]) == 1  # one agent served all three


def enqueued(runtime: RunService, text: str, session: str = "s1") -> Invocation:
    invocation = turn(runtime, text, session)
    invocation.on_busy = "enqueue"
    return invocation


async def test_an_enqueue_turn_on_one_server_keeps_its_sessions_agent(tmp_path):
    # An enqueue message claims its session in the busy document (so that another server's message waits
    # for it), and while the session's runs stay on one server its agent is kept between turns.
    runtime = runtime_on(tmp_path)
    runtime.root = counting = CountingStorage(runtime.root)
    await runtime.invoke("acme", enqueued(runtime, "one"))
    reads = counting.reads
    record, failure = await runtime.invoke("acme", enqueued(runtime, "two"))
    assert failure is None
    assert texts(record) == ["one", "two"]
    assert counting.reads == reads + 1  # the kept agent's one read (is_current), no snapshot or manifest
    state, _ = await runtime.slots("acme").read("chat", "s1")
    assert (state.active, state.queue) == (None, [])  # released after the turn


async def test_an_enqueue_turn_after_another_servers_run_loads_the_session(tmp_path, monkeypatch):
    # The other server's enqueue turn went through the busy document: this server's kept agent is behind,
    # so the next turn here loads the session instead of running on it, losing the save and running again.
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    config = write_config(tmp_path, f"file:{tmp_path}/store")
    (tmp_path / "chat.yaml").write_text(
        (tmp_path / "chat.yaml")
        .read_text()
        .replace("tests.support:echo_reply", "tests.server.agents:counted_echo")
    )
    first, other = RunService(load_config(config)), RunService(load_config(config))
    await first.invoke("acme", enqueued(first, "one"))
    await other.invoke("acme", enqueued(other, "from the other process"))
    record, failure = await first.invoke("acme", enqueued(first, "two"))
    assert failure is None, failure
    assert texts(record) == ["one", "from the other process", "two"]
    assert calls.read_text().split("\n")[:-1] == [
        "one",
        "from the other process",
        "two",
    ]  # each model call once


async def test_an_enqueue_turn_that_lost_to_a_reject_turn_of_another_server_runs_again(tmp_path, monkeypatch):
    first, other = runtime_on(tmp_path), runtime_on(tmp_path)
    await first.invoke("acme", enqueued(first, "one"))
    await other.invoke("acme", turn(other, "from the other process"))  # reject: no busy document
    # The other server's turn lands after the kept agent's check, while its turn runs (the check is told
    # it was first, once): the turn loses the save, stores nothing, and runs again on the session loaded
    # afresh, instead of being answered 409 (as a message with reject is).
    checks = iter([True])
    original = SnapshotSessionManager.is_current

    async def raced(manager, agent):
        return next(checks, None) or await original(manager, agent)

    monkeypatch.setattr(SnapshotSessionManager, "is_current", raced)
    record, failure = await first.invoke("acme", enqueued(first, "two"))
    assert failure is None, failure
    assert texts(record) == ["one", "from the other process", "two"]
    assert record.status == "completed"
    record, failure = await first.invoke("acme", enqueued(first, "three"))
    assert failure is None
    assert texts(record) == ["one", "from the other process", "two", "three"]


async def test_a_background_run_of_the_session_leaves_no_kept_agent_behind(tmp_path):
    # A background run loads the session and writes a turn; the agent kept by the turn before it is then
    # behind, and the next plain turn here must not run on it (it used to lose its save: 409).
    runtime = runtime_on(tmp_path)
    await runtime.invoke("acme", turn(runtime, "one"))
    background = turn(runtime, "two")
    await runtime.start("acme", background)  # no lifespan: it runs before this returns
    ran = await runtime.run_record("acme", background.run_id)
    assert ran is not None
    assert ran.status == "completed"
    record, failure = await runtime.invoke("acme", turn(runtime, "three"))
    assert failure is None, failure
    assert texts(record) == ["one", "two", "three"]
