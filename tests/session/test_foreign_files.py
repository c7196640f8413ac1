"""Files orchestra did not write (or a newer one did) are refused with the file and field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestra import Agent
from orchestra.errors import SnapshotError
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage
from orchestra.testing import ScriptedModel

SNAPSHOTS = "session/s/scopes/agent/default/snapshots"


def saved_session(root: Path) -> None:
    Agent(
        model=ScriptedModel(["a"]),
        session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(root)),
    )("hi")


def load(root: Path) -> Agent:
    return Agent(
        model=ScriptedModel([]), session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(root))
    )


def edit(path: Path, change: dict) -> None:
    """Change a stored file as another system or a hand would: without orchestra's checksum."""
    data = json.loads(path.read_text())
    data.pop("crc32", None)
    data.update(change)
    path.write_text(json.dumps(data))


def test_a_string_schema_version_is_refused(tmp_path: Path) -> None:
    saved_session(tmp_path)
    edit(tmp_path / SNAPSHOTS / "snapshot_latest.json", {"schema_version": "2.0"})
    with pytest.raises(
        SnapshotError, match=r"snapshot_latest.json: schema_version '2.0' is not an orchestra"
    ):
        load(tmp_path)


def test_the_manifest_version_is_checked(tmp_path: Path) -> None:
    saved_session(tmp_path)
    edit(tmp_path / SNAPSHOTS / "manifest.json", {"schema_version": 99})
    with pytest.raises(
        SnapshotError, match=r"manifest.json: schema_version 99 was written by a newer orchestra"
    ):
        load(tmp_path)


def test_foreign_fields_are_refused_not_loaded_half(tmp_path: Path) -> None:
    saved_session(tmp_path)
    latest = tmp_path / SNAPSHOTS / "snapshot_latest.json"
    data = json.loads(latest.read_text())
    data.pop("crc32")  # written by another system: no checksum
    data["data"]["agent"] = {"agent_id": "default", "conversation": []}  # not ours
    data["data"]["interrupt_state"] = {"interrupts": {}, "context": {}, "activated": False}
    latest.write_text(json.dumps(data))
    for record in (tmp_path / "session/s/scopes/agent/default/journal").iterdir():
        record.unlink()  # the snapshot alone is the state
    with pytest.raises(SnapshotError, match=r"field\(s\) agent, interrupt_state are not an orchestra"):
        load(tmp_path)
