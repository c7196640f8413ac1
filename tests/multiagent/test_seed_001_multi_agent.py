"""The multi-agent Python example of the session document (seed 001), under orchestra's names."""

import pytest

from orchestra import Agent
from orchestra.multiagent import GraphBuilder, Status
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage
from orchestra.testing import ScriptedModel


def build(model_replies):
    researcher = Agent(name="researcher", model=ScriptedModel(model_replies["researcher"]))
    writer = Agent(name="writer", model=ScriptedModel(model_replies["writer"]))

    session_manager = SnapshotSessionManager(
        session_id="multi-agent-session",
        storage=LocalFileStorage("./sessions/"),
        multi_agent_save_latest_on="node",
    )

    builder = GraphBuilder()
    builder.add_node(researcher, "researcher")
    builder.add_node(writer, "writer")
    builder.add_edge("researcher", "writer")
    builder.set_session_manager(session_manager)
    return builder.build()


def test_graph_with_an_orchestrator_session(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    graph = build({"researcher": ["AI facts"], "writer": ["An essay on AI"]})
    result = graph("Research and write about AI")
    assert result.status == Status.COMPLETED
    assert str(result) == "An essay on AI"
    latest = (
        tmp_path
        / "sessions/session/multi-agent-session/scopes/multiAgent/graph/snapshots/snapshot_latest.json"
    )
    assert latest.is_file()
    # a session whose last run completed starts a fresh run on the next invocation
    again = build({"researcher": ["More facts"], "writer": ["Another essay"]})
    assert str(again("Research and write about AI")) == "Another essay"


def test_only_the_orchestrator_may_own_a_session_manager(tmp_path):
    agent = Agent(
        name="researcher", session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(tmp_path))
    )
    with pytest.raises(ValueError, match="only the orchestrator may own a session manager"):
        GraphBuilder().add_node(agent, "researcher")
