"""Frozen snapshot files written by earlier versions must keep loading as the schema evolves: ``v1`` was
written before files carried checksums, ``v1_checksums`` by the same script once they did (each file
ends with its ``crc32``)."""

import json
import shutil
from pathlib import Path

import pytest

from orchestra import Agent
from orchestra.session import Snapshot, SnapshotSessionManager
from orchestra.session.snapshot import decode_model, unseal
from orchestra.storage import LocalFileStorage
from orchestra.testing import ScriptedModel

CORPUS = Path(__file__).parent / "corpus"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))


@pytest.fixture(params=["v1", "v1_checksums"])
def corpus(request):
    return request.param


def load_v1(tmp_path, corpus):
    root = tmp_path / corpus
    shutil.copytree(CORPUS / corpus, root)
    manager = SnapshotSessionManager("corpus", storage=LocalFileStorage(root))
    return Agent(model=ScriptedModel([]), session_manager=manager), manager, root


def test_v1_session_loads(tmp_path, corpus):
    agent, _, _ = load_v1(tmp_path, corpus)
    assert agent.system_prompt == "be brief"
    assert agent.state.get() == {"n": 2}
    assert [m["role"] for m in agent.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert agent.messages[1]["content"][0]["toolUse"] == {
        "toolUseId": "tooluse_1",
        "name": "lookup",
        "input": {"city": "London"},
    }
    assert agent.messages[4]["content"][1]["image"]["source"]["bytes"] == PNG
    assert agent.messages[5]["content"][0]["text"] == "A red dot."


async def test_v1_immutable_snapshot_restores(tmp_path, corpus):
    agent, manager, root = load_v1(tmp_path, corpus)
    snapshot_id = (root / "snapshot_id.txt").read_text()
    assert await manager.list_snapshot_ids(agent) == [snapshot_id]
    await manager.restore_snapshot(agent, snapshot_id)
    assert len(agent.messages) == 4
    assert agent.state.get() == {"n": 1}


def test_v1_export_parses_and_matches_the_session(tmp_path, corpus):
    agent, _, root = load_v1(tmp_path, corpus)
    snapshot = decode_model(Snapshot, (root / "export.json").read_bytes(), "export.json")
    assert snapshot.scope == "agent"
    assert snapshot.schema_version == 1
    assert snapshot.journal is None
    exported_messages = snapshot.data["messages"]
    assert len(exported_messages) == len(agent.messages)
    assert json.loads(json.dumps(exported_messages[0])) == agent.messages[0]


@pytest.mark.parametrize(("corpus", "sealed"), [("v1", False), ("v1_checksums", True)])
def test_the_corpus_files_carry_a_checksum_from_v1_checksums_on(corpus, sealed):
    files = list((CORPUS / corpus).rglob("*.json"))
    assert len(files) == 11
    assert [unseal(p.read_bytes(), str(p)) for p in files] == [sealed] * len(files)
