"""A run record's index entry (``hosting/records.py``): written once for a session turn, whose
"executing" record ``save`` wrote with it, and by the flush for a record never saved before."""

from __future__ import annotations

import pytest

from orchestra.errors import StorageError
from orchestra.hosting.records import RunRecord, RunStore
from orchestra.storage import LocalFileStorage
from orchestra.testing import FaultyStorage


class Writes(LocalFileStorage):
    """Local files without fsync that list the keys written."""

    def __init__(self, root) -> None:
        super().__init__(root, durable=False)
        self.keys: list[str] = []

    def _write(self, key, data, expect):  # type: ignore[no-untyped-def]
        self.keys.append(key)
        return super()._write(key, data, expect)


def record(run_id: str, session_id: str | None = "s1", status: str = "executing") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent_id="chat",
        kind="agent",
        mode="session" if session_id else "none",
        session_id=session_id,
        started_at="2026-12-02T00:00:00+00:00",
        status=status,
    )


async def test_a_session_turns_record_is_flushed_without_its_index_entry_again(tmp_path):
    unsynced = Writes(tmp_path)
    runs = RunStore(LocalFileStorage(tmp_path), unsynced)
    await runs.save(record("r1"))
    runs.save_later(record("r1", status="completed"))
    runs.save_later(record("r2", session_id=None, status="completed"))  # never saved: it needs its entry
    await runs.flush()
    assert sorted(unsynced.keys) == [
        "run-index/r1",
        "run-index/r2",
        "runs/chat/-/r2.json",
        "runs/chat/s1/r1.json",
    ]
    fresh = RunStore(LocalFileStorage(tmp_path))  # another server reads them from storage
    assert [(r.run_id, r.status) for r in [await fresh.get("r1"), await fresh.get("r2")] if r] == [
        ("r1", "completed"),
        ("r2", "completed"),
    ]


async def test_a_record_whose_save_failed_is_flushed_with_its_index_entry(tmp_path):
    unsynced = Writes(tmp_path)
    faulty = FaultyStorage(unsynced)
    runs = RunStore(LocalFileStorage(tmp_path), faulty)
    faulty.fail("write", key_contains="run-index/", kind="unavailable")
    with pytest.raises(StorageError):
        await runs.save(record("r1"))
    runs.save_later(record("r1", status="completed"))
    await runs.flush()
    assert "run-index/r1" in unsynced.keys
    found = await RunStore(LocalFileStorage(tmp_path)).get("r1")
    assert found is not None
    assert found.status == "completed"
