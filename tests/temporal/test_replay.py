"""The workflow code replays every recorded history (temporalio's ``Replayer``): a change to the workflow's
decisions that would break runs in flight during an upgrade fails here. Histories are recorded by
``tests/temporal/record_histories.py``; re-record them only for a deliberate, versioned change (see
"Upgrading workers" in docs/temporal.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from orchestra.temporal.workflow import PipelineWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_every_example_has_a_recorded_history():
    names = {path.stem for path in HISTORIES}
    examples = {p.stem for p in (Path(__file__).parent.parent.parent / "examples" / "graphs").glob("*.yaml")}
    assert examples <= names, f"record histories for {sorted(examples - names)}"


@pytest.mark.parametrize(
    ("name", "text"), [(p.stem, p.read_text()) for p in HISTORIES], ids=[p.stem for p in HISTORIES]
)
async def test_a_recorded_history_replays_without_nondeterminism(name: str, text: str):
    history = WorkflowHistory.from_json(f"replay-{name}", text)
    result = await Replayer(workflows=[PipelineWorkflow]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert result.replay_failure is None, f"{name}: {result.replay_failure}"
