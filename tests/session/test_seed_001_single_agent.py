"""The single-agent Python examples of the session document (seed 001), on local files and on S3."""

import asyncio

import pytest

from orchestra import Agent
from orchestra.session import FileSessionManager, S3SessionManager, SnapshotSessionManager
from orchestra.storage import LocalFileStorage, S3Storage
from orchestra.testing import ScriptedModel
from tests.journal_files import holds_only_tombstones


@pytest.fixture(params=["local", "s3"])
def backend(request, tmp_path):
    if request.param == "local":
        return lambda sub="sessions": LocalFileStorage(tmp_path / sub)
    url, bucket = request.getfixturevalue("moto_url"), request.getfixturevalue("s3_bucket")
    return lambda sub="production": S3Storage(bucket=bucket, prefix=f"{sub}/", endpoint_url=url)


def test_basic_usage(backend):
    session_manager = SnapshotSessionManager(session_id="test-session", storage=backend())
    agent = Agent(model=ScriptedModel(["Hello! How can I help?"]), session_manager=session_manager)
    agent("Hello!")  # This conversation is persisted
    again = Agent(
        model=ScriptedModel([]), session_manager=SnapshotSessionManager("test-session", storage=backend())
    )
    assert again.messages == agent.messages


def test_reading_the_session_id(backend):
    session_manager = SnapshotSessionManager(session_id="user-123", storage=backend())
    agent = Agent(session_manager=session_manager)
    assert agent.session_id == "user-123"
    assert session_manager.session_id == "user-123"
    assert len(Agent().session_id) == 8


def test_immutable_snapshots_with_a_trigger(backend):
    session_manager = SnapshotSessionManager(
        session_id="my-session",
        storage=backend(),
        snapshot_trigger=lambda *, agent_data, **_: len(agent_data.messages) % 4 == 0,
    )
    agent = Agent(model=ScriptedModel(["1", "2"]), session_manager=session_manager)
    agent("First message")
    agent("Second message")
    ids = asyncio.run(session_manager.list_snapshot_ids(agent))
    assert len(ids) == 1


def test_listing_and_restoring_snapshots(backend):
    session_manager = SnapshotSessionManager(session_id="my-session", storage=backend())
    agent = Agent(model=ScriptedModel(["hi"]), session_manager=session_manager)
    agent("hello")

    async def restore() -> None:
        snapshot_id = await session_manager.save_snapshot(agent, is_latest=False)
        snapshot_ids = await session_manager.list_snapshot_ids(agent)
        assert snapshot_id in snapshot_ids
        agent.messages.clear()
        await session_manager.restore_snapshot(agent, snapshot_id=snapshot_id)

    asyncio.run(restore())
    assert len(agent.messages) == 2


def test_deleting_sessions(backend):
    storage = backend()
    agent = Agent(
        model=ScriptedModel(["x"]), session_manager=SnapshotSessionManager("my-session", storage=storage)
    )
    agent("hi")
    session_manager = SnapshotSessionManager(session_id="my-session", storage=storage)
    asyncio.run(session_manager.delete_session())
    # Nothing of it is left: only a tombstone per journal record, holding nothing, which a writer that
    # still holds the session meets before it writes again.
    for key in asyncio.run(storage.list("session/my-session/")):
        assert "/journal/" in key
        assert holds_only_tombstones(key, asyncio.run(storage.read(key))[0])
    again = Agent(
        model=ScriptedModel([]), session_manager=SnapshotSessionManager("my-session", storage=storage)
    )
    assert again.messages == []


def test_repository_managers(tmp_path, request):
    file_manager = FileSessionManager(session_id="user-123", storage_dir=str(tmp_path / "sessions"))
    agent = Agent(model=ScriptedModel(["stored"]), session_manager=file_manager)
    agent("hello")
    assert (tmp_path / "sessions/session_user-123/agents/agent_default/messages/message_1.json").is_file()

    url, bucket = request.getfixturevalue("moto_url"), request.getfixturevalue("s3_bucket")
    s3_manager = S3SessionManager(
        session_id="user-123", bucket=bucket, prefix="production/", endpoint_url=url
    )
    agent = Agent(model=ScriptedModel(["in s3"]), session_manager=s3_manager)
    agent("hello")
    again = Agent(
        session_manager=S3SessionManager("user-123", bucket=bucket, prefix="production/", endpoint_url=url)
    )
    assert [m["content"][0]["text"] for m in again.messages] == ["hello", "in s3"]
