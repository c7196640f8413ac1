"""Ambiguous failures: an error means nothing was stored or says that it was, a stored turn is never
reported lost, and the same agent never stores a turn twice (issue 24's reproductions, one test each)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import anyio
import anyio.lowlevel
import pytest

from orchestra import Agent
from orchestra.errors import (
    SessionConflictError,
    SnapshotError,
    StorageError,
    StorageFullError,
    StorageOutcomeUnknownError,
    StorageUnavailableError,
)
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.storage import InMemoryStorage, LocalFileStorage, S3Storage
from orchestra.storage._base import ForwardingStorage
from orchestra.testing import FaultyStorage, ScriptedModel
from tests.faults import FaultyProxy
from tests.support import cut_when

BASE = "session/s1/scopes/agent/default/"
LATEST = BASE + "snapshots/snapshot_latest.json"
SNAPSHOT_EVERY_SAVE = Compaction(min_bytes=0, ratio=0.0, max_records=1)


def agent_on(storage, replies=None, compaction=None):
    replies = [f"a{i}" for i in range(50)] if replies is None else list(replies)
    manager = SnapshotSessionManager("s1", storage=storage, compaction=compaction)
    return Agent(model=ScriptedModel(replies), session_manager=manager)


def texts(agent):
    return [m["content"][0]["text"] for m in agent.messages]


def housekeeping_failures(caplog):
    return [r for r in caplog.records if r.getMessage() == "session_housekeeping_failed"]


async def test_a_full_disk_at_the_snapshot_rewrite_is_housekeeping_the_turn_is_done(tmp_path, caplog):
    """The record fits, the compaction's snapshot_latest.json rewrite does not: the turn is stored, so it
    is reported done; the failure is logged and the next save compacts again."""
    storage = FaultyStorage(LocalFileStorage(tmp_path))
    agent = agent_on(storage, compaction=SNAPSHOT_EVERY_SAVE)
    await agent.invoke_async("first")
    storage.fail("write", "snapshot_latest.json", kind="full")
    with caplog.at_level(logging.WARNING, logger="orchestra.session"):
        await agent.invoke_async("q")  # no error: the journal record is the commit point
    assert [f.operation for f in storage.faults] == []  # the fault was hit
    (failure,) = housekeeping_failures(caplog)
    assert "StorageFullError" in failure.error
    assert "snapshot_latest.json" in failure.error
    assert failure.session_id == "s1"
    assert texts(agent_on(LocalFileStorage(tmp_path))) == ["first", "a0", "q", "a1"]  # q once
    await agent.invoke_async("next")  # compacts again, now with room
    latest = json.loads((await storage.read(LATEST))[0])
    assert [m["content"][0]["text"] for m in latest["data"]["messages"]][-2:] == ["next", "a2"]


async def test_a_full_disk_at_the_record_rolls_the_turn_back_and_says_nothing_was_stored(tmp_path):
    storage = FaultyStorage(LocalFileStorage(tmp_path))
    agent = agent_on(storage)
    await agent.invoke_async("first")
    storage.fail("write", "/journal/", kind="full")
    with pytest.raises(StorageFullError) as failed:
        await agent.invoke_async("q")
    assert failed.value.stored is False
    assert "nothing was stored" in str(failed.value)
    assert "'s1'" in str(failed.value)
    assert failed.value.key == BASE + "journal/000000000002.json"  # record 0 created the session
    assert texts(agent) == ["first", "a0"]  # rolled back in memory, as in storage
    assert texts(agent_on(LocalFileStorage(tmp_path))) == ["first", "a0"]
    await agent.invoke_async("q")  # the retry stores the turn once; the failed one never comes back
    assert texts(agent_on(LocalFileStorage(tmp_path))) == ["first", "a0", "q", "a2"]


async def test_a_real_full_disk_gives_storage_full_error_and_stores_nothing(small_disk):
    """The same on a real file system that is full: a small tmpfs."""
    mount = small_disk("96k")
    agent = agent_on(LocalFileStorage(mount), replies=["ok"] * 200)
    stored_turns = 0

    async def fill() -> None:
        nonlocal stored_turns
        for _ in range(100):
            await agent.invoke_async("x" * 20_000)
            stored_turns += 1

    with pytest.raises(StorageFullError) as failed:
        await fill()
    assert failed.value.stored is False
    assert "No space left on device" in str(failed.value)
    assert "free space" in str(failed.value)
    assert len(agent.messages) == 2 * stored_turns  # the failed turn was rolled back
    assert len(agent_on(LocalFileStorage(mount)).messages) == 2 * stored_turns  # and is not stored


async def test_a_lost_answer_is_read_back_and_the_turn_is_done(tmp_path):
    """The record is written but the answer is lost: reading it back finds our bytes, so the save
    succeeded; the same agent's next turn is not taken for another writer's."""
    storage = FaultyStorage(LocalFileStorage(tmp_path))
    agent = agent_on(storage)
    storage.fail("write", "/journal/000000000002", after=True)
    await agent.invoke_async("first")
    await agent.invoke_async("q")  # no error: read back
    await agent.invoke_async("again")  # no SessionConflictError: its own record is not another writer's
    assert [e.key for e in storage.injected] == [BASE + "journal/000000000002.json"]
    assert texts(agent_on(LocalFileStorage(tmp_path))) == ["first", "a0", "q", "a1", "again", "a2"]


async def test_an_outcome_that_cannot_be_read_back_says_so_and_the_next_save_settles_it(tmp_path):
    """The answer is lost and reading back fails too: the error says the turn may have been stored; the
    agent rolls it back, and its next save reads the record back first (ours: kept as the journal's,
    then the rolled-back memory wins), never taking it for another writer's or storing it twice."""
    storage = FaultyStorage(LocalFileStorage(tmp_path))
    agent = agent_on(storage)
    await agent.invoke_async("first")
    storage.fail("write", "/journal/000000000002", after=True)
    storage.fail("read", "/journal/000000000002")
    with pytest.raises(StorageOutcomeUnknownError) as unknown:
        await agent.invoke_async("q")
    assert unknown.value.stored is None
    assert "may or may not" not in str(unknown.value)
    assert "not known" in str(unknown.value)
    assert texts(agent) == ["first", "a0"]
    await agent.invoke_async("q")  # the caller retries: the turn ends up stored once
    assert texts(agent_on(LocalFileStorage(tmp_path))) == ["first", "a0", "q", "a2"]


async def test_a_save_cancelled_while_its_write_runs_is_settled_by_the_next_one(tmp_path):
    class SlowAnswers(ForwardingStorage):
        async def write(self, key, data, *, expect=None):
            version = await self.inner.write(key, data, expect=expect)
            if "/journal/000000000002" in key:
                started.set()
                await anyio.sleep(10)  # the write is made; the caller gives up before hearing so
            return version

    agent = agent_on(SlowAnswers(LocalFileStorage(tmp_path)))
    await agent.invoke_async("first")
    started = anyio.Event()
    await cut_when(started, lambda: agent.invoke_async("q"))
    assert texts(agent) == ["first", "a0"]
    await agent.invoke_async("next")
    assert texts(agent_on(LocalFileStorage(tmp_path))) == ["first", "a0", "next", "a2"]


async def test_s3_that_loses_an_answer_reports_the_turn_done_and_the_next_call_is_no_conflict(
    moto_url, s3_bucket
):
    """A journal PUT lands on S3, its answer is lost, and both retries get 503: S3 reads the key back,
    finds our bytes, and the save succeeded."""
    with FaultyProxy(moto_url) as proxy:
        storage = S3Storage(s3_bucket, endpoint_url=proxy.url, max_attempts=3)
        agent = agent_on(storage)
        await agent.invoke_async("first")
        proxy.lose_next(1, 503)
        proxy.fail_next(2, 503)
        await agent.invoke_async("q")  # no StorageUnavailableError "nothing was changed": it was
        await agent.invoke_async("again")  # and no SessionConflictError with no other writer
        proxy.fail_next(3, 503)  # every attempt refused, nothing lands: that error is true
        with pytest.raises(StorageUnavailableError, match="nothing was changed") as refused:
            await agent.invoke_async("refused")
        assert refused.value.stored is False
    stored = agent_on(S3Storage(s3_bucket, endpoint_url=moto_url))
    assert texts(stored) == ["first", "a0", "q", "a1", "again", "a2"]


@pytest.mark.parametrize("off_by", [-1, 1])
async def test_a_snapshot_whose_journal_seq_is_off_by_one_is_refused_naming_it(tmp_path, off_by):
    storage = LocalFileStorage(tmp_path)
    agent = agent_on(storage, compaction=Compaction(min_bytes=0, ratio=0.0, max_records=4))
    for i in range(10):
        await agent.invoke_async(f"q{i}")
    latest = json.loads((await storage.read(LATEST))[0])
    latest["journal"]["seq"] += off_by
    await storage.write(LATEST, json.dumps(latest).encode())
    with pytest.raises(SnapshotError, match="snapshot_latest.json|journal record") as refused:
        agent_on(storage)
    assert "snapshot" in str(refused.value)
    assert "Nothing was loaded" in str(refused.value)


async def test_a_damaged_base_leaves_saves_done_and_is_named_by_compact(tmp_path, caplog):
    from typer.testing import CliRunner

    from orchestra.cli import app

    storage = LocalFileStorage(tmp_path)
    folding = Compaction(min_bytes=0, ratio=0.0, max_records=2, delete_after=timedelta(0))
    agent = agent_on(storage, compaction=folding)
    for i in range(6):
        await agent.invoke_async(f"q{i}")
    base = tmp_path / BASE / "snapshots" / "snapshot_base.json"
    assert base.exists()
    base.write_text("{damaged")
    with caplog.at_level(logging.WARNING, logger="orchestra.session"):
        await agent.invoke_async("stored anyway")
    assert any("snapshot_base.json" in r.error for r in housekeeping_failures(caplog))
    assert texts(agent_on(storage))[-2:] == ["stored anyway", "a6"]
    command = ["sessions", "compact", "s1", "--min-age", "0s", "--storage", f"file:{tmp_path}"]
    result = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(app, command))
    assert result.exit_code != 0
    assert "snapshot_base.json" in result.output
    assert "not valid JSON" in result.output


async def test_a_flipped_byte_in_a_records_log_name_names_the_record_not_strands(tmp_path):
    storage = LocalFileStorage(tmp_path)
    agent = agent_on(storage)
    await agent.invoke_async("q0")
    await agent.invoke_async("q1")
    # On local files the records are the lines of a segment, journal/000000000000.json: damage record 1.
    segment = tmp_path / BASE / "journal" / "000000000000.json"
    lines = segment.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"messages"', b'"messagfs"')
    segment.write_bytes(b"\n".join(lines))
    with pytest.raises(SnapshotError) as refused:
        agent_on(storage)
    assert "journal/000000000000.json (record 1)" in str(refused.value)
    assert "damaged" in str(refused.value)
    assert "Strands" not in str(refused.value)


async def test_a_load_that_meets_a_folded_record_starts_again_from_the_new_snapshot():
    """A reader lists the journal, a writer compacts and folds the records away, the reader's reads find
    them gone: the load starts again from the new snapshot instead of failing."""
    inner = InMemoryStorage()
    folding = Compaction(min_bytes=0, ratio=0.0, max_records=3, delete_after=timedelta(0))
    writer = agent_on(inner, compaction=folding)
    for i in range(4):
        await writer.invoke_async(f"q{i}")

    class FoldsDuringTheLoad(ForwardingStorage):
        folded = False

        async def list(self, prefix="", *, start_after=None, limit=None):
            keys = await self.inner.list(prefix, start_after=start_after, limit=limit)
            if "/journal/" in prefix and not self.folded and keys:
                self.folded = True
                for i in range(4, 8):  # meanwhile, the writer goes on and folds
                    await writer.invoke_async(f"q{i}")
            return keys

    reader = agent_on(FoldsDuringTheLoad(inner))
    assert texts(reader) == texts(writer)


async def test_readers_racing_a_folding_writer_never_fail():
    storage = InMemoryStorage()
    folding = Compaction(min_bytes=0, ratio=0.0, max_records=2, delete_after=timedelta(0))
    writer = agent_on(storage, replies=[f"a{i}" for i in range(400)], compaction=folding)
    await writer.invoke_async("start")
    loads = 0

    async def write() -> None:
        for i in range(150):
            await writer.invoke_async(f"q{i}")
            await anyio.lowlevel.checkpoint()

    async def read() -> None:
        nonlocal loads
        from orchestra.session._journal import Journal
        from orchestra.session._layout import ScopeLayout

        for _ in range(300):
            doc = await Journal(storage, ScopeLayout("s1", "agent", "default")).load()
            assert doc is not None
            assert len(doc.logs["messages"]) % 2 == 0
            loads += 1

    async with anyio.create_task_group() as group:
        group.start_soon(write)
        group.start_soon(read)
    assert loads == 300


async def test_load_repair_drops_only_an_unfinished_last_turn_and_logs_it(tmp_path, caplog):
    storage = LocalFileStorage(tmp_path)
    writer = Agent(
        model=ScriptedModel(["a0", "a1"]),
        session_manager=SnapshotSessionManager("s1", storage=storage, save_latest_on="message"),
    )
    writer("q0")
    # A killed writer leaves the prompt of a turn it never answered: dropped on load, and logged.
    writer.messages.append({"role": "user", "content": [{"text": "unanswered"}]})
    await writer.session_manager.save_snapshot(writer)
    without_resume = Agent(
        model=ScriptedModel([]),
        session_manager=SnapshotSessionManager("s1", storage=storage),
        resume_turns=False,
    )
    with caplog.at_level(logging.WARNING, logger="orchestra.agent"):
        assert texts(without_resume) == ["q0", "a0"]
    assert any(r.getMessage() == "history_unfinished_turn_dropped" for r in caplog.records)
    assert texts(agent_on(storage)) == ["q0", "a0", "unanswered"]  # kept, by default, to be resumed
    # Damage before the end (two assistant messages in a row, then more turns) is refused instead.
    writer.messages[2:] = [
        {"role": "assistant", "content": [{"text": "stray"}]},
        {"role": "user", "content": [{"text": "q1"}]},
        {"role": "assistant", "content": [{"text": "a1"}]},
    ]
    await writer.session_manager.save_snapshot(writer)
    with pytest.raises(SnapshotError, match=r"messages\[2\].*damaged"):
        agent_on(storage)


async def test_a_second_writer_is_still_a_conflict_not_taken_for_our_own_record(tmp_path):
    """Settling an unknown outcome never hides a real second writer: its record at that number is not ours."""
    storage = FaultyStorage(LocalFileStorage(tmp_path))
    agent = agent_on(storage)
    await agent.invoke_async("first")
    storage.fail("write", "/journal/000000000002")  # refused: nothing written...
    storage.fail("read", "/journal/000000000002")  # ...and the read back fails, so it is not known
    storage.faults[0].kind = "reset"
    with pytest.raises(StorageOutcomeUnknownError):
        await agent.invoke_async("q")
    other = agent_on(LocalFileStorage(tmp_path), replies=["theirs"])
    await other.invoke_async("their turn")  # takes record 1
    with pytest.raises(SessionConflictError, match="another writer"):
        await agent.invoke_async("mine")
    assert texts(agent_on(LocalFileStorage(tmp_path))) == ["first", "a0", "their turn", "theirs"]


class HomemadeStorage:
    """A storage a user wrote: its client raises what it raises (``ConnectionResetError``), not a
    ``StorageError``. ``reset_record`` makes the next journal record's write raise, before or after it
    takes effect; ``reads_fail`` makes reads raise too."""

    def __init__(self) -> None:
        self.inner = InMemoryStorage()
        self.reset_record: str | None = None  # "before" | "after"
        self.reads_fail = False

    async def read(self, key):
        if self.reads_fail:
            raise ConnectionResetError(104, "Connection reset by peer")
        return await self.inner.read(key)

    async def write(self, key, data, *, expect=None):
        when, self.reset_record = (
            (self.reset_record, None) if "/journal/" in key else (None, self.reset_record)
        )
        if when == "before":
            raise ConnectionResetError(104, "Connection reset by peer")
        version = await self.inner.write(key, data, expect=expect)
        if when == "after":
            raise ConnectionResetError(104, "Connection reset by peer")
        return version

    async def delete(self, key):
        await self.inner.delete(key)

    async def list(self, prefix="", *, start_after=None, limit=None):
        return await self.inner.list(prefix, start_after=start_after, limit=limit)

    async def delete_prefix(self, prefix):
        return await self.inner.delete_prefix(prefix)


def user_prompts(storage):
    found = Agent(
        model=ScriptedModel([]), session_manager=SnapshotSessionManager("s1", storage=storage.inner)
    )
    return [m["content"][0]["text"] for m in found.messages if m["role"] == "user"]


@pytest.mark.parametrize("when", ["after", "before"])
async def test_an_exception_that_is_not_a_storage_error_at_the_commit_point_is_read_back(when):
    """A homemade storage raises ConnectionResetError at the journal record: after the write took effect
    the turn is stored, so the call succeeds; before, nothing was stored, so the error says so (a
    StorageError, stored False). A caller that retries what failed stores the turn once either way."""
    storage = HomemadeStorage()
    agent = agent_on(storage)
    await agent.invoke_async("first")
    storage.reset_record = when
    errors = []
    try:
        await agent.invoke_async("q")
    except Exception as exc:
        errors.append(exc)
        await agent.invoke_async("q")  # the caller's retry
    assert user_prompts(storage) == ["first", "q"]
    if when == "after":
        assert errors == []
    else:
        [failed] = errors
        assert isinstance(failed, StorageError)
        assert failed.stored is False
        assert "ConnectionResetError" in str(failed)
        assert "nothing was stored" in str(failed)
    await agent.invoke_async("next")
    assert user_prompts(storage) == ["first", "q", "next"]


async def test_an_exception_at_the_commit_point_that_cannot_be_read_back_is_an_unknown_outcome():
    """The record's write raises ConnectionResetError after it took effect, and reading it back raises
    too: the error says the outcome is not known (stored None), and the caller's retry, once the storage
    answers again, stores the turn once."""
    storage = HomemadeStorage()
    agent = agent_on(storage)
    await agent.invoke_async("first")
    storage.reset_record, storage.reads_fail = "after", True
    with pytest.raises(StorageOutcomeUnknownError) as failed:
        await agent.invoke_async("q")
    assert failed.value.stored is None
    assert "ConnectionResetError" in str(failed.value)
    storage.reads_fail = False
    await agent.invoke_async("q")  # the caller's retry
    assert user_prompts(storage) == ["first", "q"]
    assert texts(agent)[-2] == "q"
