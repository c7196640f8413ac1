"""Sticky swarms: the next invocation starts at the agent that had the task, and agents remember earlier
invocations (their own history, or the shared conversation), saved with the session."""

import json

import pytest
from typer.testing import CliRunner

from orchestra import Agent, load
from orchestra.cli import app
from orchestra.errors import GraphError, OrchestraSpecError
from orchestra.multiagent import Swarm
from orchestra.session import FileSessionManager, SnapshotSessionManager
from orchestra.storage import InMemoryStorage, LocalFileStorage
from orchestra.testing import FunctionModel, ToolCall

SEEN: dict[str, list] = {}


def member(name):
    def reply(messages, specs):
        SEEN.setdefault(name, []).append(list(messages))
        text = messages[-1]["content"][0].get("text", "")
        if name == "triage" and text.startswith("refund"):
            return ToolCall("handoff_to_agent", {"agent_name": "billing", "message": "a refund"})
        prompts = sum(1 for m in messages if m["role"] == "user" and "text" in m["content"][0])
        return f"{name} answers turn {prompts}"

    return Agent(name=name, model=FunctionModel(reply))


def desk(store, **options):
    return Swarm(
        [member("triage"), member("billing")],
        id="desk",
        session_manager=SnapshotSessionManager("s", storage=store),
        **options,
    )


@pytest.fixture(autouse=True)
def _fresh():
    SEEN.clear()


def test_by_default_every_invocation_starts_afresh_at_the_entry_point():
    store = InMemoryStorage()
    desk(store)("refund please")
    second = desk(store)("and another thing")
    assert second.node_history == ["triage"]
    assert SEEN["triage"][-1][0]["content"][0]["text"].startswith("and another thing")
    assert len(SEEN["triage"][-1]) == 1


def test_last_active_starts_the_next_invocation_at_the_agent_that_answered():
    store = InMemoryStorage()
    first = desk(store, resume_from="last_active")("refund please")
    assert first.node_history == ["triage", "billing"]
    second = desk(store, resume_from="last_active")("and another thing")
    assert second.node_history == ["billing"]
    assert second.output == "billing answers turn 1"  # its own history was not kept ("run")


def test_private_histories_continue_each_agent_s_conversation():
    store = InMemoryStorage()
    desk(store, resume_from="last_active", history="private")("refund please")
    second = desk(store, resume_from="last_active", history="private")("and another thing")
    assert second.output == "billing answers turn 2"
    assert [m["role"] for m in SEEN["billing"][-1]] == ["user", "assistant", "user"]
    third = desk(store, history="private")("triage again")
    assert third.node_history == ["triage"]
    assert third.output == "triage answers turn 2"  # triage remembers its first turn


def test_a_shared_history_gives_whoever_takes_the_task_the_conversation_so_far():
    store = InMemoryStorage()
    desk(store, history="shared")("refund please")
    second = desk(store, history="shared")("and another thing")
    prompt = SEEN["triage"][-1][-1]["content"][0]["text"]
    assert "Earlier in this conversation: user: refund please -> billing: billing answers turn 1" in prompt
    assert second.output == "triage answers turn 1"


def test_a_shared_history_survives_a_whole_state_session(tmp_path):
    """A repository session (Strands' layout) saves the run whole (``serialize_state``) and loads it back
    (``deserialize_state``): the conversation so far is a log there too, not a field."""

    def shared_desk():
        return Swarm(
            [member("triage"), member("billing")],
            id="desk",
            session_manager=FileSessionManager("s", storage_dir=str(tmp_path)),
            history="shared",
        )

    shared_desk()("refund please")
    shared_desk()("and another thing")
    prompt = SEEN["triage"][-1][-1]["content"][0]["text"]
    assert "Earlier in this conversation: user: refund please -> billing: billing answers turn 1" in prompt
    third = shared_desk()
    third("a third question")
    assert [e["task"] for e in third.document.log("conversation")] == [
        "refund please",
        "and another thing",
        "a third question",
    ]


def test_what_a_sticky_swarm_remembers_is_shown_by_sessions_show(tmp_path):
    (tmp_path / "desk.yaml").write_text(
        """
version: 1
kind: swarm
id: desk
resume_from: last_active
history: private
agents:
  - {name: triage, model: {provider: function, function: 'tests.support:echo_reply'}}
  - {name: billing, model: {provider: function, function: 'tests.support:echo_reply'}}
"""
    )
    storage = f"file:{tmp_path / 'store'}"
    swarm = load(tmp_path / "desk.yaml", session_id="s1", storage=storage)
    assert (swarm.resume_from, swarm.history) == ("last_active", "private")
    swarm("hello")
    shown = CliRunner().invoke(app, ["sessions", "show", "s1", "--storage", storage, "--json"])
    scope = json.loads(shown.stdout)[0]
    assert scope["last_active"] == "triage"
    assert scope["sticky"] == {"resume_from": "last_active", "history": "private"}


def test_sessions_show_gives_each_agent_s_private_history(tmp_path):
    """Issue 35, item 16: last_active and, for history="private", what each agent remembers."""
    store = LocalFileStorage(tmp_path)
    desk(store, resume_from="last_active", history="private")("refund please")
    desk(store, resume_from="last_active", history="private")("and another thing")
    storage = f"file:{tmp_path}"
    shown = CliRunner().invoke(app, ["sessions", "show", "s", "--storage", storage, "--json"])
    scope = json.loads(shown.stdout)[0]
    assert scope["last_active"] == "billing"
    assert scope["histories"] == {
        "billing": "4 messages, 2 turns, last reply: billing answers turn 2",
        "triage": "4 messages, 1 turn, last reply: Handed off to billing.",
    }
    text = CliRunner().invoke(app, ["sessions", "show", "s", "--storage", storage]).stdout
    assert (
        "  last_active: billing\n"
        "  histories:\n"
        "    billing: 4 messages, 2 turns, last reply: billing answers turn 2\n"
        "    triage: 4 messages, 1 turn, last reply: Handed off to billing.\n"
    ) in text
    assert "  sticky:\n    resume_from: last_active\n    history: private\n" in text  # words, not a dict


def test_a_swarm_that_keeps_no_private_history_shows_none(tmp_path):
    store = LocalFileStorage(tmp_path)
    desk(store, resume_from="last_active")("refund please")
    shown = CliRunner().invoke(app, ["sessions", "show", "s", "--storage", f"file:{tmp_path}", "--json"])
    assert "histories" not in json.loads(shown.stdout)[0]


def test_sticky_options_are_checked():
    with pytest.raises(GraphError, match="resume_from is 'entry_point' or 'last_active'"):
        Swarm([member("a")], resume_from="first")
    with pytest.raises(GraphError, match="history is 'run', 'shared' or 'private'"):
        Swarm([member("a")], history="all")


def test_a_graph_has_no_resume_from(tmp_path):
    (tmp_path / "g.yaml").write_text(
        "version: 1\nkind: graph\nid: g\nresume_from: last_active\nnodes:\n  - {id: x, function: 'tests.orchestration_steps:mark'}\n"
    )
    with pytest.raises(OrchestraSpecError, match=r"g.yaml:4:\d+: resume_from: resume_from is for swarms"):
        load(tmp_path / "g.yaml")
