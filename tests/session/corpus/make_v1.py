"""How the frozen schema-version-1 corpus was made (kept for reference; do not regenerate v1).

When the snapshot schema changes, add a new corpus folder made by the new code; the old folders stay
as they are and must keep loading. ``v1_checksums`` is this script's output once files carried checksums
(``python tests/session/corpus/make_v1.py tests/session/corpus/v1_checksums``, then the ``.lock`` removed).
"""

import shutil
import sys
from pathlib import Path

import anyio

from orchestra import Agent, ScriptedModel, ToolCall, tool
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.storage import LocalFileStorage


@tool
def lookup(city: str) -> str:
    """Look up the weather.

    Args:
        city: the city
    """
    return f"12C and cloudy in {city}"


async def main(target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    manager = SnapshotSessionManager(
        "corpus", storage=LocalFileStorage(target), save_latest_on="message", compaction=Compaction(0, 1.0, 6)
    )
    model = ScriptedModel(
        [ToolCall("lookup", {"city": "London"}, "tooluse_1"), "It is 12C in London.", "A red dot."]
    )
    agent = Agent(
        model=model, tools=[lookup], session_manager=manager, system_prompt="be brief", state={"n": 1}
    )
    await agent.invoke_async("What's the weather in London?")
    snapshot_id = await manager.save_snapshot(agent, is_latest=False, app_data={"label": "after weather"})
    (target / "snapshot_id.txt").write_text(snapshot_id)
    agent.state.set("n", 2)
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(32))
    await agent.invoke_async(
        [{"text": "What is in this image?"}, {"image": {"format": "png", "source": {"bytes": png}}}]
    )
    (target / "export.json").write_bytes(await manager.export("default"))


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
