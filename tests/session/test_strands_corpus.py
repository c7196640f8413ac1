"""Sessions recorded from the real Strands Agents 1.62 (``tests/interop/make_strands_corpus.py``) load in
orchestra, and what orchestra adds to them has the very shape Strands wrote. Runs without the interop extra,
so the format stays pinned everywhere."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestra import Agent, FunctionModel, ScriptedModel, ToolCall, tool
from orchestra.cli import app
from orchestra.errors import SnapshotError
from orchestra.multiagent import Graph
from orchestra.session import FileSessionManager, SnapshotSessionManager
from orchestra.storage import LocalFileStorage

CORPUS = Path(__file__).parent / "corpus" / "strands_1_62"
PNG = b"\x89PNG\r\n\x1a\n\x00binary"
HELPER = "session_conversation/agents/agent_helper"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first
        b: the second
    """
    return a + b


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    target = tmp_path / "sessions"
    shutil.copytree(CORPUS, target)
    return target


def helper(corpus: Path, replies: list) -> Agent:
    return Agent(
        model=ScriptedModel(replies),
        tools=[add],
        agent_id="helper",
        session_manager=FileSessionManager("conversation", storage_dir=str(corpus)),
    )


def test_a_strands_conversation_with_a_tool_call_and_an_image_loads_whole(corpus):
    agent = helper(corpus, [])
    assert agent.messages == [
        {
            "role": "user",
            "content": [{"text": "add 1 and 2"}, {"image": {"format": "png", "source": {"bytes": PNG}}}],
        },
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "add", "input": {"a": 1, "b": 2}}}],
        },
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": "3"}]}}],
        },
        {"role": "assistant", "content": [{"text": "three"}]},
    ]
    assert agent.state.get() == {"plan": {"step": 1}}


def test_what_orchestra_appends_has_the_shape_strands_wrote(corpus):
    agent = helper(corpus, [ToolCall("add", {"a": 3, "b": 4}, tool_use_id="t2"), "seven"])
    agent([{"text": "and 3 and 4?"}, {"image": {"format": "png", "source": {"bytes": PNG}}}])
    messages = corpus / HELPER / "messages"

    def shape(value):
        """Keys and types all the way down, without Strands' per-message extras."""
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items() if k not in ("tracking_id", "metadata")}
        if isinstance(value, list):
            return [shape(v) for v in value]
        return type(value).__name__

    for strands_file, orchestra_file in zip(range(4), range(4, 8), strict=True):
        theirs = json.loads((messages / f"message_{strands_file}.json").read_text())
        ours = json.loads((messages / f"message_{orchestra_file}.json").read_text())
        assert shape(ours) == shape(theirs), orchestra_file

    stored = json.loads((corpus / HELPER / "agent.json").read_text())
    recorded = json.loads((CORPUS / HELPER / "agent.json").read_text())
    assert stored["_internal_state"] == recorded["_internal_state"]  # Strands' own state, kept as found
    assert stored["created_at"] == recorded["created_at"]
    assert stored["conversation_manager_state"]["__name__"] == "SlidingWindowConversationManager"
    assert set(recorded) <= set(stored)


def test_a_strands_agent_without_messages_loads_and_continues(corpus):
    agent = Agent(
        model=ScriptedModel(["hello"]),
        agent_id="quiet",
        session_manager=FileSessionManager("empty", storage_dir=str(corpus)),
    )
    assert agent.messages == []
    agent("hi")
    assert (corpus / "session_empty/agents/agent_quiet/messages/message_1.json").is_file()


def test_a_strands_graph_run_is_refused_not_restarted(corpus):
    ran = []

    def node_a(messages, specs):
        ran.append("a")
        return "a"

    graph = Graph(
        [Agent(name="a", model=FunctionModel(node_a))],
        id="default_graph",
        session_manager=FileSessionManager("graph", storage_dir=str(corpus)),
    )
    with pytest.raises(
        SnapshotError, match=r"multi_agent_default_graph/multi_agent.json holds a run of a Strands"
    ):
        graph("go")
    assert ran == []


def test_a_message_kind_orchestra_does_not_support_is_named(corpus):
    path = corpus / HELPER / "messages/message_3.json"
    document = json.loads(path.read_text())
    document["message"]["content"].insert(0, {"reasoningContent": {"reasoningText": {"text": "hmm"}}})
    path.write_text(json.dumps(document))
    with pytest.raises(SnapshotError, match=r"message_3.json: message: not a message orchestra can load"):
        helper(corpus, [])


def test_a_missing_message_file_is_named_not_loaded_with_a_hole(corpus):
    (corpus / HELPER / "messages/message_1.json").unlink()
    with pytest.raises(SnapshotError, match=r"message_1.json is missing \(found message_2.json after it\)"):
        helper(corpus, [])


def test_a_truncated_file_is_named(corpus):
    path = corpus / HELPER / "agent.json"
    path.write_text(path.read_text()[:40])
    with pytest.raises(SnapshotError, match=r"agent_helper/agent.json: not valid JSON"):
        helper(corpus, [])


SNAPSHOTS = Path(__file__).parent / "corpus" / "strands_1_62_snapshot"
STRANDS_LATEST = SNAPSHOTS / "session/chat/scopes/agent/bot/snapshots/snapshot_latest.json"


def test_a_strands_snapshot_session_is_refused_with_the_command_that_imports_it(tmp_path):
    shutil.copytree(SNAPSHOTS, tmp_path / "store")
    with pytest.raises(SnapshotError, match=r"snapshot_latest.json.*--from strands") as refused:
        Agent(
            agent_id="bot",
            session_manager=SnapshotSessionManager("chat", storage=LocalFileStorage(tmp_path / "store")),
        )
    assert "\n" not in str(refused.value)


def test_sessions_import_from_strands_brings_the_agent_over(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(SNAPSHOTS, tmp_path / "strands")
    source = tmp_path / "strands/session/chat/scopes/agent/bot/snapshots/snapshot_latest.json"
    result = CliRunner().invoke(app, ["sessions", "import", str(source), "--from", "strands"])
    assert result.exit_code == 0, result.output
    assert "imported agent/bot into session chat" in result.stdout

    agent = Agent(
        model=ScriptedModel(["seven"]),
        agent_id="bot",
        session_manager=SnapshotSessionManager("chat", storage=LocalFileStorage(".orchestra")),
    )
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "user", "assistant"]
    assert agent.messages[0]["content"][1] == {"image": {"format": "png", "source": {"bytes": PNG}}}
    assert agent.messages[-1]["content"] == [{"text": "three"}]
    assert agent.state.get() == {"user": "ana"}
    assert agent.system_prompt == "Be brief."
    assert str(agent("and 3 and 4?")) == "seven"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema_version="2.0"), r"schema_version '2.0' is not a Strands snapshot version"),
        (lambda d: d.update(schema_version=1), r"an orchestra snapshot, not a Strands one"),
        (lambda d: d.update(scope="multiAgent"), r"scope 'multiAgent': only agent snapshots can be imported"),
        (
            lambda d: d["data"]["interrupt_state"].update(activated=True),
            r"data.interrupt_state: the agent is waiting",
        ),
        (
            lambda d: d["data"]["messages"][1]["content"].append({"cachePoint": {"type": "default"}}),
            r"data.messages\[1\]: not a message orchestra can load",
        ),
    ],
)
def test_a_strands_snapshot_orchestra_cannot_take_is_named(tmp_path, monkeypatch, change, message):
    monkeypatch.chdir(tmp_path)
    document = json.loads(STRANDS_LATEST.read_text())
    change(document)
    source = tmp_path / "snapshot_latest.json"
    source.write_text(json.dumps(document))
    result = CliRunner().invoke(
        app, ["sessions", "import", str(source), "--from", "strands", "--session-id", "x"]
    )
    assert result.exit_code == 1
    assert re.search(message, result.stderr), result.stderr
    assert "snapshot_latest.json" in result.stderr
    assert not (tmp_path / ".orchestra" / "session").exists()  # nothing half-imported
