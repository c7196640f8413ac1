"""A changed byte in a stored session is caught, never loaded as something else (issue 35 item 12).

Records, snapshots and manifests carry a checksum (``crc32``, see ``orchestra.session.snapshot``).
Hypothesis changes one byte of a file a load reads, at a random place, to a random other value: the
load raises ``SnapshotError`` naming that file, or (provably harmless) gives exactly what was stored.
Never a raw exception, never different content. Files written before checksums (the frozen corpus)
still load, and a changed byte in them is at worst loaded as it reads: never a raw exception.
150 examples each (1,500 with ``ORCHESTRA_STRESS=1``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestra import Agent, ToolCall, tool
from orchestra.errors import SnapshotError
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session.snapshot import unseal
from orchestra.storage import InMemoryStorage, LocalFileStorage
from orchestra.testing import ScriptedModel
from tests.session.test_fault_schedules import SETTINGS

EXAMPLES = 1500 if os.environ.get("ORCHESTRA_STRESS") == "1" else 150
CORPUS = Path(__file__).parent / "corpus"
NEVER = Compaction(min_bytes=2**40, max_records=2**40, delete_after=None)


@tool
def lookup(city: str) -> str:
    """Look up the weather.

    Args:
        city: the city
    """
    return f"12C and cloudy in {city}"


async def stored_session() -> tuple[InMemoryStorage, dict[str, bytes], Agent]:
    """A session whose load reads a snapshot, its manifest and records after it (a tool call, state,
    an image), and the files a load reads, as they are."""
    storage = InMemoryStorage()
    manager = SnapshotSessionManager(
        "s", storage=storage, save_latest_on="message", compaction=Compaction(0, 1.0, 4, delete_after=None)
    )
    model = ScriptedModel(
        [ToolCall("lookup", {"city": "Oslo"}, "tooluse_1"), "It is 12C in Oslo.", "A red dot.", "Bye."]
    )
    agent = await Agent.create(
        model=model, tools=[lookup], session_manager=manager, system_prompt="be brief", state={"n": 1}
    )
    await agent.invoke_async("What's the weather in Oslo?")
    agent.state.set("n", 2)
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(32))
    await agent.invoke_async(
        [{"text": "What is in this image?"}, {"image": {"format": "png", "source": {"bytes": png}}}]
    )
    # Then records after the snapshot: a writer that does not compact.
    agent = await Agent.create(
        model=ScriptedModel(["Bye.", "Bye again."]),
        tools=[lookup],
        session_manager=SnapshotSessionManager("s", storage=storage, compaction=NEVER),
    )
    await agent.invoke_async("thanks")
    await agent.invoke_async("bye")
    latest = "session/s/scopes/agent/default/snapshots/snapshot_latest.json"
    seq = json.loads((await storage.read(latest))[0])["journal"]["seq"]
    read = [latest, "session/s/scopes/agent/default/snapshots/manifest.json"]
    read += [
        k for k in await storage.list("session/s/scopes/agent/default/journal/") if int(k[-17:-5]) >= seq
    ]
    assert len(read) >= 4  # the snapshot, the manifest, its own record and at least one after it
    return storage, {key: (await storage.read(key))[0] for key in read}, agent


@pytest.fixture(scope="module")
def session() -> tuple[InMemoryStorage, dict[str, bytes], Agent]:
    return anyio.run(stored_session)


def test_every_file_a_session_writes_carries_a_checksum(session):
    storage, _, _ = session

    async def every_file() -> list[str]:
        return await storage.list("session/")

    for key in anyio.run(every_file):
        assert unseal(anyio.run(storage.read, key)[0], key), f"{key} has no checksum"


async def load(storage) -> Agent:
    return await Agent.create(
        model=ScriptedModel([]), tools=[lookup], session_manager=SnapshotSessionManager("s", storage=storage)
    )


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_a_changed_byte_is_caught_naming_its_file(session, data) -> None:
    storage, files, agent = session
    key = data.draw(st.sampled_from(sorted(files)), label="file")
    original = files[key]
    position = data.draw(st.integers(0, len(original) - 1), label="position")
    xor = data.draw(st.integers(1, 255), label="xor")
    damaged = bytearray(original)
    damaged[position] ^= xor

    async def scenario() -> None:
        await storage.write(key, bytes(damaged))
        refused: SnapshotError | None = None
        try:
            loaded = await load(storage)
        except SnapshotError as exc:
            refused = exc
        finally:
            await storage.write(key, original)
        if refused is not None:
            assert key in str(refused), f"the error does not name the damaged file: {refused}"
            return
        # Loaded: only if the change is provably harmless, that is, everything is exactly as stored.
        assert loaded.messages == agent.messages
        assert loaded.state.get() == agent.state.get()
        assert loaded.system_prompt == agent.system_prompt

    anyio.run(scenario)


def test_a_checksum_that_does_not_match_names_the_file_and_what_to_do(session):
    storage, files, _ = session
    key = next(k for k in files if "/journal/" in k)
    text = (
        files[key].replace(b"Oslo", b"Oslp", 1)
        if b"Oslo" in files[key]
        else files[key].replace(b'"t":1', b'"t":2', 1)
    )

    async def scenario() -> None:
        await storage.write(key, text)
        try:
            with pytest.raises(SnapshotError) as refused:
                await load(storage)
        finally:
            await storage.write(key, files[key])
        message = str(refused.value)
        assert key in message
        assert "checksum" in message
        assert "restore the session" in message

    anyio.run(scenario)


# -- files written before checksums ------------------------------------------------------------------


def corpus_files() -> list[Path]:
    base = CORPUS / "v1" / "session" / "corpus" / "scopes" / "agent" / "default"
    return sorted(p for p in base.rglob("*.json") if "immutable_history" not in str(p))


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_a_changed_byte_in_a_file_written_before_checksums_is_never_a_raw_exception(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("v1")
    shutil.copytree(CORPUS / "v1", root, dirs_exist_ok=True)
    files = corpus_files()
    path = data.draw(st.sampled_from(files), label="file")
    target = root / path.relative_to(CORPUS / "v1")
    original = target.read_bytes()
    assert not unseal(original, str(path))
    position = data.draw(st.integers(0, len(original) - 1), label="position")
    damaged = bytearray(original)
    damaged[position] ^= data.draw(st.integers(1, 255), label="xor")
    target.write_bytes(bytes(damaged))

    async def scenario() -> None:
        manager = SnapshotSessionManager("corpus", storage=LocalFileStorage(root))
        with contextlib.suppress(SnapshotError):
            await Agent.create(model=ScriptedModel([]), session_manager=manager)

    anyio.run(scenario)


@pytest.mark.parametrize(
    ("before", "after"),
    [(b'"role"', b'"rolg"'), (b'"content"', b'"contenu"'), (b'"assistant"', b'"`ssistant"')],
)
def test_a_damaged_message_in_a_file_written_before_checksums_names_the_file(tmp_path, before, after):
    """Without a checksum a changed byte can only be caught by what it breaks: a message that lost its
    role or content list (a raw KeyError before), or whose role is no role, is refused naming the file."""
    shutil.copytree(CORPUS / "v1", tmp_path, dirs_exist_ok=True)
    record = tmp_path / "session/corpus/scopes/agent/default/journal/000000000006.json"
    data = record.read_bytes()
    assert before in data
    record.write_bytes(data.replace(before, after, 1))
    manager = SnapshotSessionManager("corpus", storage=LocalFileStorage(tmp_path))
    with pytest.raises(
        SnapshotError, match="000000000006.json: item 0 of a message log is not a valid message"
    ):
        Agent(model=ScriptedModel([]), session_manager=manager)
