"""A run interrupted on version 1 of a pipeline resumes on version 2, which renamed a node: the
migration registered for v1 carries the saved run over. Run: python examples/python/versioned.py"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestra.hooks import HookRegistry
from orchestra.multiagent.events import BeforeNodeCall
from orchestra.session import SnapshotSessionManager
from orchestra.spec import build, parse_file
from orchestra.storage import InMemoryStorage, Storage

GRAPHS = Path(__file__).parent.parent / "graphs"


class AskBeforeReview:
    """Stops the run before the reviewer until a human says go (so that it is waiting when v2 deploys)."""

    def register_hooks(self, registry: HookRegistry) -> None:
        registry.add_callback(BeforeNodeCall, self.ask)

    def ask(self, event: BeforeNodeCall) -> None:
        if event.node_id == "reviewer":
            event.interrupt("go", reason="review now?")


def run(version: str, storage: Storage, task: Any) -> Any:
    session = SnapshotSessionManager("v-1", storage=storage)
    pipeline: Any = build(parse_file(GRAPHS / f"versioned_{version}.yaml"), session_manager=session)
    pipeline.hooks.add_hook(AskBeforeReview())
    return pipeline, pipeline(task)


if __name__ == "__main__":
    storage = InMemoryStorage()
    _, waiting = run("v1", storage, "Announce the new pricing page.")
    print(f"  v1: {waiting.status.value} before the review, after {waiting.execution_order}")
    answer = [{"interruptResponse": {"interruptId": waiting.interrupts[0].id, "response": "go"}}]
    v2, result = run("v2", storage, answer)  # deployed meanwhile: "draft" is now "write"
    print(result.status.value, result.execution_order, v2.run["migrations"])
    print(result.results["write"].output)
