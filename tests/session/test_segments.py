"""Journal segments (issue 33 item 5): on local files a record is one line appended to its scope's
segment, durable after one ``fdatasync``; a second writer is refused all the same; what a killed writer
leaves (an unfinished last line) is dropped, anything else that does not read whole is refused naming
the file and record; record files written before segments (the frozen corpus) continue as segments.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestra import Agent
from orchestra.errors import SessionConflictError, SnapshotError
from orchestra.multiagent import GraphBuilder
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import LocalFileStorage
from orchestra.storage._base import ForwardingStorage
from orchestra.testing import FaultyStorage, ScriptedModel
from tests.journal_files import is_segment, journal_records
from tests.multiagent.test_sessions import Counter, chain
from tests.session.test_fault_schedules import SETTINGS

BASE = "session/s1/scopes/agent/default/"
JOURNAL = BASE + "journal/"
NEVER = Compaction(min_bytes=2**40, max_records=2**40, delete_after=None)
EVERY_3 = Compaction(min_bytes=0, ratio=1.0, max_records=3, delete_after=None)
CORPUS = Path(__file__).parent / "corpus"


def agent_on(storage, replies=("a0", "a1", "a2", "a3", "a4", "a5"), compaction=NEVER, **options) -> Agent:
    manager = SnapshotSessionManager(
        "s1", storage=storage, save_latest_on="message", compaction=compaction, **options
    )
    return Agent(model=ScriptedModel(list(replies)), session_manager=manager)


def texts(agent: Agent) -> list[str]:
    return [m["content"][0]["text"] for m in agent.messages]


@pytest.fixture
def syncs(monkeypatch):
    """Every fsync and fdatasync the process makes (the storage's worker threads included)."""
    made: list[str] = []
    fsync, fdatasync = os.fsync, os.fdatasync

    def counted_fsync(fd: int) -> None:
        made.append("fsync")
        fsync(fd)

    def counted_fdatasync(fd: int) -> None:
        made.append("fdatasync")
        fdatasync(fd)

    monkeypatch.setattr(os, "fsync", counted_fsync)
    monkeypatch.setattr(os, "fdatasync", counted_fdatasync)
    return made


# -- one sync a record -----------------------------------------------------------------------------------


async def test_a_saved_turn_costs_one_fdatasync_a_record_on_local_files(tmp_path, syncs):
    storage = LocalFileStorage(tmp_path)
    agent = agent_on(storage)
    await agent.invoke_async("q0")  # the scope and its first segment exist from here on
    before = len(await journal_records(storage, JOURNAL))
    syncs.clear()
    await agent.invoke_async("q1")
    await agent.invoke_async("q2")
    added = len(await journal_records(storage, JOURNAL)) - before
    assert added == 4  # a prompt and an answer a turn, each saved on its own
    assert syncs == ["fdatasync"] * added  # no folder sync, no second sync of the file
    assert list(await storage.list(JOURNAL)) == [JOURNAL + "000000000000.json"]  # one segment
    assert texts(agent_on(storage)) == ["q0", "a0", "q1", "a1", "q2", "a2"]


async def test_a_graph_node_saved_on_local_files_costs_one_fdatasync(tmp_path, syncs):
    builder = GraphBuilder().set_graph_id("chain")
    for name in "abcdef":
        builder.add_node(lambda task, _n=name: f"{_n} done", node_id=name)
    for first, second in zip("abcde", "bcdef", strict=True):
        builder.add_edge(first, second)
    builder.set_session_manager(
        SnapshotSessionManager("s1", storage=LocalFileStorage(tmp_path), compaction=NEVER)
    )
    graph = builder.build()
    await graph.invoke_async("go")  # record 0 starts the scope: new folders and a new file, synced too
    journal = "session/s1/scopes/multiAgent/chain/journal/"
    before = len(await journal_records(LocalFileStorage(tmp_path), journal))
    syncs.clear()
    await graph.invoke_async("again")  # a completed run starts afresh: a record a node, and the end
    added = len(await journal_records(LocalFileStorage(tmp_path), journal)) - before
    assert added >= 6
    assert syncs == ["fdatasync"] * added


# -- a killed writer, and damage -------------------------------------------------------------------------


async def test_a_killed_writers_unfinished_line_is_dropped_and_cut_off_by_the_next_save(tmp_path, caplog):
    storage = LocalFileStorage(tmp_path)
    agent = agent_on(storage)
    await agent.invoke_async("q0")
    segment = tmp_path / JOURNAL / "000000000000.json"
    whole = segment.read_bytes()
    # What a writer killed in the middle of appending record 4 leaves: the start of its line.
    segment.write_bytes(whole + b'{"seq":4,"t":17964,"logs":{"messages":{"at":2,"add":[{"role":"us')
    with caplog.at_level(logging.WARNING):
        again = agent_on(storage, replies=["b0"])
    assert texts(again) == ["q0", "a0"]
    assert "journal_unfinished_record_dropped" in caplog.text
    await again.invoke_async("q1")  # cuts it off, then appends
    assert segment.read_bytes().startswith(whole)
    assert texts(agent_on(storage)) == ["q0", "a0", "q1", "b0"]
    assert all(line.startswith(b'{"seq":') for line in segment.read_bytes().split(b"\n")[:-1])


async def test_a_record_whose_newline_changed_is_damage_not_a_killed_writer(tmp_path):
    storage = LocalFileStorage(tmp_path)
    await agent_on(storage).invoke_async("q0")
    segment = tmp_path / JOURNAL / "000000000000.json"
    segment.write_bytes(segment.read_bytes()[:-1] + b" ")
    with pytest.raises(SnapshotError, match=r"000000000000\.json \(record 2\): damaged"):
        agent_on(storage)


async def test_a_segment_cut_short_before_a_later_one_is_refused(tmp_path):
    storage = LocalFileStorage(tmp_path)
    agent = agent_on(storage, compaction=EVERY_3)
    for i in range(3):
        await agent.invoke_async(f"q{i}")
    keys = await storage.list(JOURNAL)
    assert len(keys) > 1  # compactions rolled over to new segments
    first = tmp_path / keys[0]
    first.write_bytes(first.read_bytes()[:-30])
    journal = Journal(storage, ScopeLayout("s1", "agent", "default"))
    with pytest.raises(SnapshotError, match=r"cut short in the middle of a record, and later files"):
        await journal.records.read(-1)  # every record, as a load at an early snapshot does


async def test_a_line_after_a_seal_is_refused(tmp_path):
    storage = LocalFileStorage(tmp_path)
    agent = agent_on(storage, compaction=EVERY_3)
    for i in range(3):
        await agent.invoke_async(f"q{i}")
    keys = await storage.list(JOURNAL)
    sealed = tmp_path / keys[-2]
    lines = sealed.read_bytes().split(b"\n")
    assert lines[-2].startswith(b'{"sealed":true')
    sealed.write_bytes(sealed.read_bytes() + lines[0] + b"\n")
    journal = Journal(storage, ScopeLayout("s1", "agent", "default"))
    with pytest.raises(SnapshotError, match="follows the segment's seal"):
        await journal.records.read(-1)


async def stored_session(root: Path) -> tuple[dict[str, bytes], Agent]:
    storage = LocalFileStorage(root)
    agent = agent_on(storage, compaction=EVERY_3)
    agent.state.set("n", 1)
    for i in range(4):
        await agent.invoke_async(f"q{i}")
    files = {key: (await storage.read(key))[0] for key in await storage.list(JOURNAL)}
    assert sum(is_segment(data) for data in files.values()) >= 2
    return files, agent


@settings(max_examples=100 if os.environ.get("ORCHESTRA_STRESS") != "1" else 1000, **SETTINGS)
@given(data=st.data())
def test_a_changed_byte_in_a_segment_is_caught_naming_its_file(tmp_path_factory, data) -> None:
    root = tmp_path_factory.mktemp("damage")
    files, agent = anyio.run(stored_session, root)
    key = data.draw(st.sampled_from(sorted(files)), label="file")
    original = files[key]
    position = data.draw(st.integers(0, len(original) - 1), label="position")
    damaged = bytearray(original)
    damaged[position] ^= data.draw(st.integers(1, 255), label="xor")
    (root / key).write_bytes(bytes(damaged))
    refused: SnapshotError | None = None
    try:
        loaded = agent_on(LocalFileStorage(root))
        loaded_all = anyio.run(
            Journal(LocalFileStorage(root), ScopeLayout("s1", "agent", "default")).load_at, 0
        )
    except SnapshotError as exc:
        refused = exc
    finally:
        shutil.rmtree(root)
    if refused is not None:
        assert key in str(refused), f"the error does not name the damaged file: {refused}"
        return
    # Loaded: only if the change is provably harmless, that is, everything is exactly as stored.
    assert loaded.messages == agent.messages
    assert loaded.state.get() == agent.state.get()
    assert loaded_all is not None


# -- second writers ---------------------------------------------------------------------------------------


async def test_two_writers_with_the_same_view_when_one_rolls_over_the_other_is_refused(tmp_path):
    storage = LocalFileStorage(tmp_path)
    layout = ScopeLayout("s1", "agent", "default")
    first = Journal(storage, layout, NEVER)
    await first.load()
    await first.create(_doc(["m0"]))
    await first.save({}, {"messages": ["m0", "m1"]})
    second = Journal(storage, layout, NEVER)
    await second.load()  # the same view as the first
    assert await first.records.seal()  # what a compaction does after it: the next record starts a segment
    await first.save({}, {"messages": ["m0", "m1", "mine"]})
    with pytest.raises(SessionConflictError, match="another writer"):
        await second.save({}, {"messages": ["m0", "m1", "theirs"]})
    assert (await Journal(storage, layout).load()).logs["messages"] == ["m0", "m1", "mine"]


async def test_a_writer_without_appends_continues_a_segment_and_one_behind_is_refused(tmp_path):
    """A storage that cannot append (a wrapper) continues a segment an appending writer started, by a
    compare-and-swap rewrite; neither writes a record file beside it that the other would miss."""
    appending = agent_on(LocalFileStorage(tmp_path), replies=["a0"])
    await appending.invoke_async("q0")
    rewriting = agent_on(FaultyStorage(LocalFileStorage(tmp_path)), replies=["b0"])
    await rewriting.invoke_async("q1")
    assert await LocalFileStorage(tmp_path).list(JOURNAL) == [JOURNAL + "000000000000.json"]
    with pytest.raises(SessionConflictError, match="another writer"):
        await appending.invoke_async("behind")
    assert texts(agent_on(LocalFileStorage(tmp_path))) == ["q0", "a0", "q1", "b0"]


async def test_after_a_seal_a_writer_without_appends_and_one_with_them_race_for_one_key(tmp_path):
    local = LocalFileStorage(tmp_path)
    layout = ScopeLayout("s1", "agent", "default")
    appending = Journal(local, layout, NEVER)
    await appending.load()
    await appending.create(_doc(["m0"]))
    assert await appending.records.seal()
    writing = Journal(FaultyStorage(local), layout, NEVER)  # record files, no appends
    await writing.load()
    await writing.save({}, {"messages": ["m0", "theirs"]})  # record 1 as a file of its own
    with pytest.raises(SessionConflictError, match="another writer"):
        await appending.save({}, {"messages": ["m0", "mine"]})  # record 1 as a new segment: taken
    assert (await Journal(local, layout).load()).logs["messages"] == ["m0", "theirs"]


# -- compaction, folding, following, deleting ------------------------------------------------------------


async def test_compaction_seals_the_segment_and_a_fold_deletes_whole_segments(tmp_path):
    storage = LocalFileStorage(tmp_path)
    fold_now = Compaction(
        min_bytes=0, ratio=1.0, max_records=3, delete_after=__import__("datetime").timedelta(0)
    )
    agent = agent_on(storage, replies=[f"a{i}" for i in range(12)], compaction=fold_now)
    for i in range(12):
        await agent.invoke_async(f"q{i}")
    keys = await storage.list(JOURNAL)
    assert JOURNAL + "000000000000.json" not in keys  # folded away whole
    for key in keys[:-1]:
        assert (await storage.read(key))[0].split(b"\n")[-2].startswith(b'{"sealed":true')
    assert texts(agent_on(storage)) == [t for i in range(12) for t in (f"q{i}", f"a{i}")]


class _Reads(ForwardingStorage):
    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.reads: list[str] = []
        self.appends = True

    async def read(self, key):
        self.reads.append(f"read {key}")
        return await self.inner.read(key)

    async def read_from(self, key, offset):
        self.reads.append(f"read_from {key} {offset}")
        return await self.inner.read_from(key, offset)

    async def append(self, key, data, *, at, tail=b""):
        return await self.inner.append(key, data, at=at, tail=tail)


async def test_a_reader_following_a_segment_reads_only_what_was_appended(tmp_path):
    storage = LocalFileStorage(tmp_path)
    layout = ScopeLayout("s1", "multiAgent", "run")
    writer = Journal(storage, layout, NEVER)
    await writer.load()
    await writer.create(_doc([0], name="log"))
    counting = _Reads(storage)
    reader = Journal(counting, layout)
    doc = await reader.load()
    items = [0]
    for n in range(1, 4):
        items = [*items, n]
        await writer.save({"n": n}, {"log": items})
    counting.reads.clear()
    doc = await reader.catch_up(doc)
    assert (doc.fields["n"], doc.logs["log"]) == (3, [0, 1, 2, 3])
    assert len(counting.reads) == 1
    assert counting.reads[0].startswith("read_from ")


async def test_an_erased_segment_refuses_a_writer_that_held_it(tmp_path):
    storage = LocalFileStorage(tmp_path)
    kept = agent_on(storage)
    await kept.invoke_async("q0")
    await kept.session_manager.delete_session()
    assert not await kept.session_manager.is_current(kept)
    with pytest.raises(SessionConflictError, match="deleted"):
        await kept.invoke_async("after the delete")
    records = await journal_records(storage, JOURNAL)
    assert len(records) == 4
    assert all(record.get("deleted") is True for record in records)
    assert agent_on(storage).messages == []


async def test_a_redacted_message_is_gone_from_the_segment_and_the_writer_goes_on(tmp_path):
    storage = LocalFileStorage(tmp_path)
    agent = agent_on(storage, replies=["my secret is 1234", "fine"])
    await agent.invoke_async("q0")
    await agent.redact_latest_message("[REDACTED]")
    await agent.invoke_async("q1")  # appends after the rewritten segment
    for key in await storage.list("session/"):
        assert b"1234" not in (await storage.read(key))[0], key
    assert texts(agent_on(storage)) == ["q0", "[REDACTED]", "q1", "fine"]


# -- the frozen corpus -----------------------------------------------------------------------------------


@pytest.mark.parametrize("corpus", ["v1", "v1_checksums"])
async def test_record_files_written_before_segments_continue_as_a_segment(tmp_path, corpus):
    root = tmp_path / corpus
    shutil.copytree(CORPUS / corpus, root)
    journal = "session/corpus/scopes/agent/default/journal/"
    storage = LocalFileStorage(root)
    before = await storage.list(journal)
    manager = SnapshotSessionManager("corpus", storage=storage)
    agent = Agent(model=ScriptedModel(["a new answer"]), session_manager=manager)
    loaded = list(agent.messages)
    await agent.invoke_async("a new question")
    after = await storage.list(journal)
    assert after[: len(before)] == before
    assert len(after) == len(before) + 1
    new = (await storage.read(after[-1]))[0]
    assert is_segment(new)
    assert json.loads(new.split(b"\n")[0])["seq"] == int(after[-1][-17:-5])
    again = Agent(model=ScriptedModel([]), session_manager=SnapshotSessionManager("corpus", storage=storage))
    assert again.messages == [*loaded, *agent.messages[len(loaded) :]]
    assert [m["content"][0]["text"] for m in again.messages[-2:]] == ["a new question", "a new answer"]


async def test_a_graph_run_failed_on_record_files_resumes_on_segments(tmp_path):
    """A graph run that failed half way while its records were files of their own (what every writer
    wrote before segments, and what a storage without appends writes) resumes on local files: completed
    nodes do not run again, its next records go to a segment after the record files, and a load reads
    both."""
    journal = "session/s1/scopes/multiAgent/pipeline/journal/"
    counter = Counter()
    first = await chain(counter, FaultyStorage(LocalFileStorage(tmp_path)), n=6, fail_at=3).invoke_async(
        "task"
    )
    assert first.status.value == "failed"
    before = await LocalFileStorage(tmp_path).list(journal)
    assert before
    assert not any(is_segment((tmp_path / key).read_bytes()) for key in before)
    again = Counter()
    again.calls = dict(counter.calls)
    result = await chain(again, LocalFileStorage(tmp_path), n=6).invoke_async()
    assert result.status.value == "completed"
    assert result.resumed
    assert again.calls == {"n0": 1, "n1": 1, "n2": 1, "n3": 2, "n4": 1, "n5": 1}
    after = await LocalFileStorage(tmp_path).list(journal)
    assert after[: len(before)] == before
    assert len(after) == len(before) + 1
    assert is_segment((tmp_path / after[-1]).read_bytes())
    doc = await Journal(LocalFileStorage(tmp_path), ScopeLayout("s1", "multiAgent", "pipeline")).load()
    assert doc is not None
    assert doc.fields["run"]["status"] == "completed"
    assert doc.logs["execution_order"] == ["n0", "n1", "n2", "n3", "n3", "n4", "n5"]


def _doc(messages, name="messages"):
    from orchestra.session._document import Document

    return Document(fields={"state": {}}, logs={name: list(messages)})


# -- processes -------------------------------------------------------------------------------------------

WRITER = """
import sys
from orchestra import Agent, ScriptedModel
from orchestra.conversation import NullConversationManager
from orchestra.errors import SessionConflictError
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.storage import LocalFileStorage

root, name = sys.argv[1], sys.argv[2]
compaction = Compaction(min_bytes=0, ratio=1.0, max_records=6, delete_after=None)  # segments roll over
for i in range(int(sys.argv[3])):
    manager = SnapshotSessionManager("s1", storage=LocalFileStorage(root), compaction=compaction)
    # (an open turn a killed or refused writer left is answered first, with the first reply)
    try:
        agent = Agent(
            model=ScriptedModel([f"answer {name}{i}"] * 2),
            conversation_manager=NullConversationManager(),
            session_manager=manager,
        )
    except SessionConflictError:  # both created the session at once: the other's is there; the turn never began
        print("refused", f"{name}{i}", False, flush=True)
        continue
    try:
        agent(f"{name}{i}")
    except SessionConflictError as exc:  # the other writer saved first: a new manager reads it
        kept_open = any("kept open" in note for note in getattr(exc, "__notes__", ()))
        print("refused", f"{name}{i}", None if kept_open else exc.stored, flush=True)
        continue
    print("acked", f"{name}{i}", flush=True)
"""


def _outcomes(lines: list[str]) -> tuple[list[str], list[str]]:
    acked = [line.split()[1] for line in lines if line.startswith("acked ")]
    refused = [line.split()[1] for line in lines if line.startswith("refused ")]
    return acked, refused


def _prompts(root: Path) -> list[str]:
    """Every prompt stored, from the journal itself (an agent would keep only its window of them)."""
    doc = anyio.run(Journal(LocalFileStorage(root), ScopeLayout("s1", "agent", "default")).load)
    assert doc is not None
    return [m["content"][0]["text"] for m in doc.logs["messages"] if m["role"] == "user"]


def test_processes_killed_while_appending_lose_no_acknowledged_turn(tmp_path):
    """Real processes append turns and are SIGKILLed at random moments: every turn a process was told is
    stored (it printed ``acked``) is in the session once, every turn at most once, and each next process
    loads what the killed one left (an unfinished line at the end of the segment is dropped)."""
    rounds = 40 if os.environ.get("ORCHESTRA_STRESS") == "1" else 8
    rng = random.Random(33)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    acked: list[str] = []
    for index in range(rounds):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), f"p{index}-", "1000"],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert child.stdout is not None
        lines = [child.stdout.readline() for _ in range(rng.randint(1, 6))]  # some turns acked, then
        time.sleep(rng.uniform(0.0, 0.01))  # a kill at a random point of a later turn
        child.send_signal(signal.SIGKILL)
        lines += child.stdout.read().splitlines()  # what it printed before it died
        child.stdout.close()
        child.wait()
        acked += _outcomes(lines)[0]
    prompts = _prompts(tmp_path)
    assert len(acked) >= rounds
    assert [p for p in prompts if p in acked] == acked  # every acknowledged turn, in order, once
    assert len(prompts) == len(set(prompts))
    assert len(os.listdir(tmp_path / JOURNAL)) > 1  # segments rolled over along the way


def test_two_processes_appending_to_one_session_at_once(tmp_path):
    """Two real processes save turns to the same session at the same time: one of two racing appends is
    refused (``SessionConflictError``), never merged; every acknowledged turn is stored once, and a turn
    refused as not stored is not there."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    turns = 60 if os.environ.get("ORCHESTRA_STRESS") == "1" else 15
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), name, str(turns)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for name in ("a", "b")
    ]
    lines: list[str] = []
    try:
        for child in children:
            out, _ = child.communicate(timeout=300)
            assert child.returncode == 0
            lines += out.splitlines()
    finally:  # a failed writer leaves no process behind for the next test
        for child in children:
            if child.poll() is None:
                child.kill()
            child.communicate()
    acked, refused = _outcomes(lines)
    prompts = _prompts(tmp_path)
    assert len(acked) + len(refused) == 2 * turns
    assert sorted(p for p in prompts if p in acked) == sorted(acked)
    assert len(prompts) == len(set(prompts))
    not_stored = {
        line.split()[1] for line in lines if line.startswith("refused ") and line.split()[2] == "False"
    }
    assert not not_stored & set(prompts)
