"""A Strands Agents session to import: a real Strands agent (``pip install -e '.[interop]'``, the
``strands-agents`` package) answers one turn on a canned model and saves its session with Strands' own
SnapshotSessionManager under ./strands/ (session "chat", agent "bot"). Then:

    orchestra sessions import ./strands/session/chat/scopes/agent/bot/snapshots/snapshot_latest.json --from strands

Run: python examples/python/strands_session.py [FOLDER]
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import strands
from strands.models.model import Model
from strands.session.snapshot_session_manager import SnapshotSessionManager
from strands.storage.local_file_storage import LocalFileStorage


class CannedModel(Model):
    """A Strands model that always answers the same text (no network, no credentials)."""

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> dict[str, Any]:
        return {}

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # type: ignore[no-untyped-def]
        raise NotImplementedError
        yield

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs) -> AsyncIterator[Any]:  # type: ignore[no-untyped-def]
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": self.reply}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}
        yield {
            "metadata": {
                "usage": {"inputTokens": 5, "outputTokens": 4, "totalTokens": 9},
                "metrics": {"latencyMs": 1},
            }
        }


def main(folder: str = "./strands") -> None:
    agent = strands.Agent(
        agent_id="bot",
        system_prompt="Be brief.",
        model=CannedModel("Tides come from the Moon's pull."),
        session_manager=SnapshotSessionManager("chat", storage=LocalFileStorage(folder)),
        state={"user": "ana"},
        callback_handler=None,
    )
    agent("Why are there tides?")
    print(f"wrote {folder}/session/chat/scopes/agent/bot/snapshots/snapshot_latest.json")


if __name__ == "__main__":
    main(*sys.argv[1:])
