"""One live writer per session and agent: a second writer gets SessionConflictError, never a merge."""

import subprocess
import sys
import textwrap
import threading

import pytest

from orchestra import Agent
from orchestra.errors import SessionConflictError
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage, S3Storage
from orchestra.testing import ScriptedModel


def agent_on(storage, replies=("one", "two", "three")):
    return Agent(
        model=ScriptedModel(list(replies)), session_manager=SnapshotSessionManager("shared", storage=storage)
    )


async def test_two_agents_with_the_same_ids_in_one_process(storage):
    first = agent_on(storage)
    second = agent_on(storage)
    await first.invoke_async("from the first")
    with pytest.raises(
        SessionConflictError, match=r"session 'shared' agent 'default': another writer"
    ) as info:
        await second.invoke_async("from the second")
    assert "Reload" in str(info.value)
    reloaded = agent_on(storage)
    assert [m["content"][0]["text"] for m in reloaded.messages] == ["from the first", "one"]
    await reloaded.invoke_async("continue")  # a reloaded writer is current again
    assert len(agent_on(storage).messages) == 4


async def test_the_stale_writer_is_refused_whichever_saves_second(storage):
    first = agent_on(storage)
    second = agent_on(storage)
    await second.invoke_async("second saves first")
    with pytest.raises(SessionConflictError):
        await first.invoke_async("first is now stale")


async def test_different_agent_ids_share_a_session(storage):
    manager = SnapshotSessionManager("shared", storage=storage)
    a = Agent(model=ScriptedModel(["a"]), agent_id="a", session_manager=manager)
    b = Agent(model=ScriptedModel(["b"]), agent_id="b", session_manager=manager)
    await a.invoke_async("to a")
    await b.invoke_async("to b")
    assert agent_on(storage).messages == []


def test_two_creators_of_a_new_session_exactly_one_wins(storage):
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def create():
        barrier.wait()
        try:
            agent_on(storage)
            outcomes.append("won")
        except SessionConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=create) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Either both saw nothing and raced (one wins, one conflicts) or the second loaded what the first made.
    assert outcomes.count("won") >= 1
    assert sorted(outcomes) in (["conflict", "won"], ["won", "won"])


async def test_racing_creators_on_the_same_empty_scope_conflict(storage):
    from orchestra.session._document import Document
    from orchestra.session._journal import Journal
    from orchestra.session._layout import ScopeLayout

    layout = ScopeLayout("race", "agent", "default")
    first, second = Journal(storage, layout), Journal(storage, layout)
    assert await first.load() is None
    assert await second.load() is None  # both saw an empty scope
    await first.create(Document(fields={"state": {"by": "first"}}))
    with pytest.raises(SessionConflictError):
        await second.create(Document(fields={"state": {"by": "second"}}))
    doc = await Journal(storage, layout).load()
    assert doc.fields["state"] == {"by": "first"}


CHILD = textwrap.dedent(
    """
    import sys
    from orchestra import Agent, ScriptedModel
    from orchestra.session import SnapshotSessionManager
    from orchestra.storage import LocalFileStorage, S3Storage

    kind, where, bucket = sys.argv[1], sys.argv[2], sys.argv[3]
    storage = LocalFileStorage(where) if kind == "local" else S3Storage(bucket, endpoint_url=where)
    agent = Agent(model=ScriptedModel(["child reply"]), session_manager=SnapshotSessionManager("shared", storage=storage))
    agent("from the child process")
    """
)


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_writer_in_another_process_is_detected(kind, tmp_path, request):
    if kind == "local":
        storage, where, bucket = LocalFileStorage(tmp_path), str(tmp_path), "-"
    else:
        where, bucket = request.getfixturevalue("moto_url"), request.getfixturevalue("s3_bucket")
        storage = S3Storage(bucket, endpoint_url=where)
    parent = agent_on(storage)
    parent("from the parent")
    subprocess.run([sys.executable, "-c", CHILD, kind, where, bucket], check=True, timeout=60)
    with pytest.raises(SessionConflictError):
        parent("the parent is stale now")
    texts = [m["content"][0]["text"] for m in agent_on(storage).messages]
    assert texts == ["from the parent", "one", "from the child process", "child reply"]


async def test_a_compaction_by_another_writer_does_not_fail_a_durable_save(storage):
    """Writer A compacts after its record; writer B, current, appends and compacts too: B's save stands."""
    from orchestra.session import Compaction
    from orchestra.session._document import Document
    from orchestra.session._journal import Journal
    from orchestra.session._layout import ScopeLayout

    layout = ScopeLayout("race", "agent", "default")
    eager = Compaction(min_bytes=0, ratio=0.0, max_records=1)
    a = Journal(storage, layout, eager)
    await a.create(Document(fields={"n": 0}))
    b = Journal(storage, layout, eager)
    await b.load()  # B reads the snapshot A wrote at creation
    await a.save({"n": 1}, {})  # A appends record 1 and rewrites snapshot_latest
    b2 = Journal(storage, layout, eager)
    await b2.load()  # a current writer, holding A's snapshot version from before A's next compaction
    b2._latest_version = b._latest_version  # as if it had read the snapshot before A compacted
    assert await b2.save({"n": 2}, {}) is True  # its record is durable; the compaction race is not a conflict
    doc = await Journal(storage, layout).load()
    assert doc.fields["n"] == 2
