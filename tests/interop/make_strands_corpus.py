"""Record sessions written by the real Strands Agents SDK, so their format stays pinned without the package.

Run it with the ``interop`` extra installed (``python tests/interop/make_strands_corpus.py``) to refresh
``tests/session/corpus/strands_<version>/``; ``tests/session/test_strands_corpus.py`` reads the result.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
from pathlib import Path

import strands
from strands.multiagent import GraphBuilder
from strands.session.file_session_manager import FileSessionManager
from strands.session.snapshot_session_manager import SnapshotSessionManager
from strands.storage.local_file_storage import LocalFileStorage

sys.path.insert(0, str(Path(__file__).parent))
from strands_stub import ScriptedStrandsModel

PNG = b"\x89PNG\r\n\x1a\n\x00binary"


@strands.tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def main() -> None:
    version = importlib.metadata.version("strands-agents")
    target = (
        Path(__file__).parent.parent
        / "session"
        / "corpus"
        / f"strands_{version.rsplit('.', 1)[0].replace('.', '_')}"
    )
    shutil.rmtree(target, ignore_errors=True)

    helper = strands.Agent(
        agent_id="helper",
        model=ScriptedStrandsModel([("add", "t1", {"a": 1, "b": 2}), "three"]),
        tools=[add],
        session_manager=FileSessionManager("conversation", storage_dir=str(target)),
        callback_handler=None,
    )
    helper.state.set("plan", {"step": 1})
    helper([{"text": "add 1 and 2"}, {"image": {"format": "png", "source": {"bytes": PNG}}}])

    strands.Agent(
        agent_id="quiet",
        model=ScriptedStrandsModel([]),
        session_manager=FileSessionManager("empty", storage_dir=str(target)),
        callback_handler=None,
    )

    builder = GraphBuilder()
    builder.add_node(
        strands.Agent(name="a", model=ScriptedStrandsModel(["from a"]), callback_handler=None), "a"
    )
    builder.add_node(
        strands.Agent(name="b", model=ScriptedStrandsModel(["from b"]), callback_handler=None), "b"
    )
    builder.add_edge("a", "b")
    builder.set_session_manager(FileSessionManager("graph", storage_dir=str(target)))
    builder.build()("go")

    # The snapshot layout (SnapshotSessionManager), in a folder of its own.
    snapshots = target.with_name(f"{target.name}_snapshot")
    shutil.rmtree(snapshots, ignore_errors=True)
    strands.Agent(
        agent_id="bot",
        system_prompt="Be brief.",
        model=ScriptedStrandsModel([("add", "t1", {"a": 1, "b": 2}), "three"]),
        tools=[add],
        session_manager=SnapshotSessionManager("chat", storage=LocalFileStorage(str(snapshots))),
        state={"user": "ana"},
        callback_handler=None,
    )([{"text": "add 1 and 2"}, {"image": {"format": "png", "source": {"bytes": PNG}}}])
    print(f"wrote {target} and {snapshots}")


if __name__ == "__main__":
    main()
