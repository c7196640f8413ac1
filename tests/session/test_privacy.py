"""Redaction leaves the secret nowhere in storage; small session defects stay fixed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestra import Agent
from orchestra._ids import validate_id
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.storage import LocalFileStorage
from orchestra.testing import ScriptedModel

SECRET = "4111 1111 1111 1111"


def files_holding(root: Path, text: str) -> list[str]:
    return [
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()
    ]


@pytest.mark.parametrize("strategy", ["message", "invocation"])
async def test_a_redacted_secret_is_found_nowhere_in_storage(tmp_path: Path, strategy: str) -> None:
    root = tmp_path / "store"
    manager = SnapshotSessionManager(
        "private",
        storage=LocalFileStorage(root),
        save_latest_on=strategy,  # type: ignore[arg-type]
        compaction=Compaction(min_bytes=2000, ratio=1.5, max_records=30),  # compact along the way
    )
    agent = await Agent.create(
        model=ScriptedModel([f"answer {i}" for i in range(101)]), session_manager=manager
    )
    for turn in range(99):
        await agent.invoke_async(f"turn {turn}")
    await agent.invoke_async(f"my card is {SECRET}")
    await agent.invoke_async("one more")  # the secret is now in older records and maybe a compaction
    assert files_holding(root, SECRET)
    # A guardrail catches it late: redact the turn's user message in place.
    index = next(i for i, m in enumerate(agent.messages) if SECRET in m["content"][0].get("text", ""))
    agent.messages[:] = agent.messages[: index + 1]
    await agent.redact_latest_message("[REDACTED]")
    assert files_holding(root, SECRET) == []
    stored = (await manager.journal("agent", "default").load()).logs["messages"]  # type: ignore[union-attr]
    assert stored[-1]["content"] == [{"text": "[REDACTED]"}]


@pytest.mark.parametrize("bad", ["abc\n", "a/b", "..", ".lock", "x" * 129, ""])
def test_ids_are_matched_in_full(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid session_id"):
        validate_id(bad, "session_id")


async def test_restoring_an_empty_state_is_saved(tmp_path: Path) -> None:
    storage = LocalFileStorage(tmp_path)
    manager = SnapshotSessionManager("s", storage=storage)
    agent = await Agent.create(model=ScriptedModel(["a", "b"]), session_manager=manager)
    await agent.invoke_async("one")
    empty = await manager.save_snapshot(agent, is_latest=False)
    agent.state.set("later", 1)
    await agent.invoke_async("two")
    await manager.restore_snapshot(agent, empty)
    await manager.save_snapshot(agent)
    again = await Agent.create(
        model=ScriptedModel([]), session_manager=SnapshotSessionManager("s", storage=storage)
    )
    assert again.state.to_dict() == {}
