"""Retention inside a session: folded journal records are deleted, and nothing becomes unloadable or
silently overwritable because of it."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from orchestra import Agent
from orchestra.conversation import SlidingWindowConversationManager
from orchestra.errors import SessionConflictError
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage._base import ForwardingStorage
from orchestra.testing import ScriptedModel
from tests.journal_files import journal_records

AGENT = "session/s1/scopes/agent/default/"
EAGER = Compaction(min_bytes=0, ratio=1.0, max_records=5, delete_after=timedelta(0))


def manager(storage, compaction=EAGER, **kwargs):
    return SnapshotSessionManager(
        "s1", storage=storage, save_latest_on="message", compaction=compaction, **kwargs
    )


def windowed(storage, replies, compaction=EAGER, **kwargs):
    return Agent(
        model=ScriptedModel(replies),
        conversation_manager=SlidingWindowConversationManager(window_size=6),
        session_manager=manager(storage, compaction, **kwargs),
    )


async def stored_bytes(storage) -> int:
    total = 0
    for key in await storage.list(AGENT):
        total += len((await storage.read(key))[0])
    return total


async def test_folded_records_are_deleted_and_the_session_loads_the_same(storage):
    agent = windowed(storage, [f"reply {i}" for i in range(50)], keep_snapshots=2)
    manager_ = agent.session_manager
    sizes = []
    for i in range(50):
        await agent.invoke_async(f"question {i}")
        if i % 5 == 0:
            await manager_.save_snapshot(agent, is_latest=False)
        if i % 10 == 9:
            sizes.append(await stored_bytes(storage))
    records = await storage.list(f"{AGENT}journal/")
    # ~100 records were written; those older than the oldest kept snapshot (10 turns back) are gone
    assert 0 < len(records) < 40
    assert records[0] > f"{AGENT}journal/000000000060.json"
    assert max(sizes[2:]) < 2 * max(sizes[:2])  # bounded, not growing with the turns
    again = windowed(storage, [])
    assert again.messages == agent.messages
    assert again.state.get() == agent.state.get()
    for snapshot_id in await manager_.list_snapshot_ids(agent):  # the kept snapshots still load
        await again.session_manager.restore_snapshot(again, snapshot_id)
        assert again.messages[-1]["role"] == "assistant"


async def test_records_younger_than_delete_after_and_immutable_snapshots_keep_their_records(storage):
    slow = Compaction(min_bytes=0, ratio=1.0, max_records=5, delete_after=timedelta(hours=1))
    agent = windowed(storage, [f"r{i}" for i in range(20)], slow)
    for i in range(20):
        await agent.invoke_async(f"q{i}")
    journal = await storage.list(f"{AGENT}journal/")
    assert journal[0].endswith("/000000000000.json")  # none is old enough to go
    assert len(await journal_records(storage, f"{AGENT}journal/")) > 40  # (files, or segments' lines)

    kept = windowed(storage, [f"r{i}" for i in range(20)], EAGER, keep_snapshots=None)
    first = await kept.session_manager.save_snapshot(kept, is_latest=False)
    for i in range(20):
        await kept.invoke_async(f"again {i}")
    assert len(await journal_records(storage, f"{AGENT}journal/")) > 40  # the first snapshot pins them
    await kept.session_manager.restore_snapshot(kept, first)
    assert kept.messages[-1]["content"] == [{"text": "r19"}]


async def test_a_writer_that_fell_behind_is_refused_after_its_next_record_was_deleted(storage):
    stale = windowed(storage, ["stale"])
    live = windowed(storage, [f"r{i}" for i in range(30)])
    for i in range(30):
        await live.invoke_async(f"q{i}")
    assert f"{AGENT}journal/000000000001.json" not in await storage.list(f"{AGENT}journal/")  # stale's next
    with pytest.raises(
        SessionConflictError, match="another writer saved this scope|its records were folded away"
    ):
        await stale.invoke_async("from the stale writer")
    assert windowed(storage, []).messages == live.messages


async def test_the_idle_check_runs_only_after_half_of_delete_after(storage):
    quick = Compaction(min_bytes=0, ratio=1.0, max_records=3, delete_after=timedelta(milliseconds=300))
    stale = windowed(storage, ["stale"], quick)
    live = windowed(storage, [f"r{i}" for i in range(20)], quick)
    for i in range(10):
        await live.invoke_async(f"q{i}")
    await anyio.sleep(0.35)  # now the records so far are old enough to go, and the stale writer is idle
    for i in range(10, 20):
        await live.invoke_async(f"q{i}")
    assert f"{AGENT}journal/000000000001.json" not in await storage.list(f"{AGENT}journal/")
    with pytest.raises(SessionConflictError):
        await stale.invoke_async("from the stale writer")


async def test_a_session_deleted_under_an_idle_writer_refuses_its_next_save(storage):
    agent = windowed(storage, ["one", "two"])
    await agent.invoke_async("first")
    await storage.delete_prefix("session/s1/")
    with pytest.raises(
        SessionConflictError, match="session was deleted or pruned while this writer was idle"
    ):
        await agent.invoke_async("second")
    assert await storage.list("session/s1/") == []  # nothing half-written: the session is simply gone


async def test_a_fold_interrupted_between_base_and_deletes_leaves_a_loadable_session(storage):
    keep_all = Compaction(min_bytes=0, ratio=1.0, max_records=5, delete_after=None)
    agent = windowed(storage, [f"r{i}" for i in range(12)], keep_all)
    for i in range(6):
        await agent.invoke_async(f"q{i}")

    class CrashAfterTwoDeletes(ForwardingStorage):  # deletes one key at a time (no delete_many)
        deleted = 0

        async def delete(self, key: str) -> None:
            if self.deleted == 2:
                raise OSError("killed mid-fold")
            self.deleted += 1
            await self.inner.delete(key)

    # e.g. 'orchestra sessions compact'
    folder = Journal(CrashAfterTwoDeletes(storage), ScopeLayout("s1", "agent", "default"), EAGER)
    await folder.load()
    with pytest.raises(OSError):
        await folder.fold()
    folder.storage = storage
    assert windowed(storage, [], keep_all).messages == agent.messages
    assert await folder.fold() > 0  # the next fold deletes what was left
    assert windowed(storage, [], keep_all).messages == agent.messages
    await agent.invoke_async("the live writer goes on")  # its newest record was kept
    assert windowed(storage, [], keep_all).messages == agent.messages


async def test_a_redacted_secret_is_scrubbed_from_the_folded_base_too(storage):
    agent = windowed(storage, [f"r{i}" for i in range(8)])
    await agent.append_message({"role": "user", "content": [{"text": "my pin is 4321"}]})
    await agent.append_message({"role": "assistant", "content": [{"text": "ok"}]})
    for i in range(8):
        await agent.invoke_async(f"q{i}")
    assert f"{AGENT}snapshots/snapshot_base.json" in await storage.list(AGENT)
    # redaction of an older message goes through the journal's scrub of every stored copy
    journal = agent.session_manager.journal("agent", "default")
    await journal.load()
    await journal.redact(
        {"role": "user", "content": [{"text": "my pin is 4321"}]},
        {"role": "user", "content": [{"text": "[removed]"}]},
    )
    for key in await storage.list(AGENT):
        assert b"4321" not in (await storage.read(key))[0], key


def test_cli_compact_folds_a_session_and_it_loads_the_same(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from orchestra.cli import app
    from orchestra.storage import LocalFileStorage

    monkeypatch.chdir(tmp_path)

    def make(replies):
        return Agent(
            model=ScriptedModel(replies),
            session_manager=SnapshotSessionManager("s1", storage=LocalFileStorage(".orchestra")),
        )

    agent = make([f"r{i}" for i in range(31)])
    for i in range(30):
        agent(f"q{i}")
    journal = tmp_path / ".orchestra" / AGENT / "journal"
    before = len(list(journal.glob("*.json")))
    # Below the writers' delete_after (10 minutes, recorded in the scope's manifest) it is refused: a
    # writer idle since then would save into the folded journal, told it succeeded, its turn in no load.
    refused = CliRunner().invoke(app, ["sessions", "compact", "s1", "--min-age", "0s"])
    assert refused.exit_code == 1
    assert "below the 0:10:00" in refused.output
    assert "--force" in refused.output
    assert len(list(journal.glob("*.json"))) == before
    result = CliRunner().invoke(
        app, ["sessions", "compact", "s1", "--min-age", "0s", "--force", "--keep-snapshots", "1"]
    )
    assert result.exit_code == 0, result.output
    assert f"agent/default: deleted {before - 1} journal record(s)" in result.stdout
    assert [p.name for p in journal.glob("*.json")] == [f"{before - 1:012d}.json"]
    assert make([]).messages == agent.messages
    agent("the writer goes on")  # it saved less than delete_after ago: no check needed, and none fails
    assert make([]).messages == agent.messages
    again = CliRunner().invoke(app, ["sessions", "compact", "s1", "--min-age", "soon"])
    assert again.exit_code == 2
    assert "0s, 30m, 12h" in again.output


class _SnapshotReads:
    """Counts the reads of a scope's snapshot files (each as large as the session) through a storage."""

    def __init__(self, inner):
        self.inner, self.snapshot_reads = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def read(self, key):
        self.snapshot_reads += "/snapshots/snapshot_" in key
        return await self.inner.read(key)


async def test_a_long_sessions_saves_do_not_read_its_snapshots_while_nothing_is_old_enough_to_fold(storage):
    """Compactions keep happening as the session grows; the fold after each must not read the whole
    session back (snapshot_latest and snapshot_base) when its oldest record is too young to fold."""
    counting = _SnapshotReads(storage)
    compaction = Compaction(min_bytes=0, ratio=1.0, max_records=5, delete_after=timedelta(minutes=10))
    agent = Agent(
        model=ScriptedModel([f"reply {i}" for i in range(60)]),
        session_manager=manager(counting, compaction),
    )
    reads_at_start = counting.snapshot_reads  # the first load
    for i in range(60):
        await agent.invoke_async(f"question {i}")
    assert len(await journal_records(storage, f"{AGENT}journal/")) > 100  # nothing folded: all young
    assert counting.snapshot_reads == reads_at_start


async def test_a_reader_that_fell_behind_a_fold_catches_up_by_loading_again(storage):
    """``Journal.catch_up`` (a Temporal worker following a run) reads the records since its last read;
    when the writer folded some of them away meanwhile, it loads the scope again instead of failing or
    missing what they held."""
    layout = ScopeLayout("s1", "multiAgent", "run")
    writer = Journal(storage, layout, EAGER)
    await writer.load()
    await writer.save({"n": 0}, {"log": [0]})
    reader = Journal(storage, layout)
    doc = await reader.load()
    assert doc is not None
    items = [0]
    for n in range(1, 4):  # fewer than a compaction: the reader follows record by record
        items = [*items, n]
        await writer.save({"n": n}, {"log": items})
    doc = await reader.catch_up(doc)
    assert (doc.fields["n"], doc.logs["log"]) == (3, [0, 1, 2, 3])
    for n in range(4, 30):  # compactions and folds delete the records the reader has not seen
        items = [*items, n]
        await writer.save({"n": n}, {"log": items})
    assert not await storage.read(layout.record(reader.seq + 1))
    doc = await reader.catch_up(doc)
    assert (doc.fields["n"], doc.logs["log"]) == (29, list(range(30)))
    assert reader.seq == writer.seq
