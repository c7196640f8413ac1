"""The agent loop's promises beyond its results (issue 33 point 3): an invocation nobody streams builds no
stream event and no hook event nobody listens to, while a stream still gets every event in order; an
agent is bound to where it is stored through ``bind_session``, which its tools' idempotency keys follow,
and given a session after it was built through ``attach_session``; its ledger is ``agent.pending_tools``."""

from __future__ import annotations

from typing import Any

import pytest

from orchestra import Agent, ToolContext, tool
from orchestra.agent import (
    MessageEvent,
    PendingTools,
    ResultEvent,
    TextChunkEvent,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
)
from orchestra.conversation import SlidingWindowConversationManager
from orchestra.errors import ConfigurationError
from orchestra.hooks import (
    AfterInvocation,
    AfterModelCall,
    AfterToolCall,
    BeforeInvocation,
    BeforeModelCall,
    BeforeToolCall,
    MessageAdded,
)
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import ScriptedModel, ToolCall, collect
from orchestra.tools.effects import idempotency_key

STREAM_EVENTS = (TextChunkEvent, ToolCallEvent, ToolProgressEvent, ToolResultEvent, MessageEvent, ResultEvent)
HOOK_EVENTS = (BeforeInvocation, AfterInvocation, BeforeModelCall, AfterModelCall, MessageAdded)


@tool(context=True)
def lookup(key: str, tool_context: ToolContext) -> str:
    """Look a key up.

    Args:
        key: the key
    """
    tool_context.report_progress(1, 1)
    return f"value of {key} (key {tool_context.idempotency_key})"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the stream and hook events built from now on."""
    names: list[str] = []
    for event_type in (*STREAM_EVENTS, *HOOK_EVENTS):
        original = event_type.__init__

        def counting(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            names.append(type(self).__name__)
            _original(self, *args, **kwargs)

        monkeypatch.setattr(event_type, "__init__", counting)
    return names


def scripted_turn() -> Agent:
    return Agent(model=ScriptedModel([ToolCall("lookup", {"key": "k"}), "found it"]), tools=[lookup])


async def test_an_invocation_nobody_streams_builds_no_event(built: list[str]) -> None:
    agent = scripted_turn()
    result = await agent.invoke_async("look k up")
    assert str(result) == "found it"
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "user", "assistant"]
    assert built == []  # no stream event, and no hook event: nothing listens to any


def test_the_sync_facade_builds_no_event_either(built: list[str]) -> None:
    agent = scripted_turn()
    assert str(agent("look k up")) == "found it"
    assert built == []


async def test_a_hook_event_is_built_for_its_listeners_only(built: list[str]) -> None:
    agent = scripted_turn()
    seen: list[str] = []
    agent.hooks.add_callback(AfterModelCall, lambda event: seen.append(str(event.stop_reason)))
    await agent.invoke_async("look k up")
    assert seen == ["tool_use", "end_turn"]
    assert built == ["AfterModelCall", "AfterModelCall"]


async def test_a_stream_gets_every_event_in_order(built: list[str]) -> None:
    agent = scripted_turn()
    events = await collect(agent.stream_async("look k up"))
    kinds = [type(event).__name__ for event in events]
    assert kinds == [
        "MessageEvent",  # the prompt
        "ToolCallEvent",  # as the model streams it
        "MessageEvent",  # the model's tool call message
        "ToolProgressEvent",
        "ToolResultEvent",
        "MessageEvent",  # the tool results
        "TextChunkEvent",
        "MessageEvent",  # the answer
        "ResultEvent",
    ]
    assert built == kinds  # the hook events nobody listens to are not built for a stream either
    assert str(events[-1].result) == "found it"


async def test_bind_session_scopes_the_idempotency_keys_of_the_agents_tools() -> None:
    agent = Agent(model=ScriptedModel([ToolCall("lookup", {"key": "k"}, "call-1"), "done"]), tools=[lookup])
    kept: list[dict[str, Any]] = []
    agent.bind_session("s1/agent/default", dropped_messages=kept)
    assert agent.effect_scope == "s1/agent/default"
    assert agent.dropped_messages is kept
    await agent.invoke_async("look k up")
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["content"] == [
        {"text": f"value of k (key {idempotency_key('s1/agent/default', 'call-1')})"}
    ]
    with pytest.raises(AttributeError):
        agent.effect_scope = "elsewhere"  # type: ignore[misc]  # only bind_session binds it


async def test_the_conversation_manager_notes_what_it_cuts_in_the_bound_list() -> None:
    agent = Agent(
        model=ScriptedModel(["one", "two"]),
        conversation_manager=SlidingWindowConversationManager(window_size=2),
    )
    kept: list[dict[str, Any]] = []
    agent.bind_session("s1/agent/default", dropped_messages=kept)
    await agent.invoke_async("first")
    await agent.invoke_async("second")
    assert [m["content"][0]["text"] for m in agent.messages] == ["second", "two"]
    assert [m["content"][0]["text"] for m in kept] == ["first", "one"]


async def test_attach_session_gives_a_built_agent_its_session_and_restores_what_it_saved() -> None:
    storage = InMemoryStorage()
    first = await Agent.create(
        model=ScriptedModel(["one"]),
        agent_id="helper",
        session_manager=SnapshotSessionManager("s1", storage=storage),
    )
    await first.invoke_async("hi")
    later = Agent(model=ScriptedModel(["two"]))  # built without a session, as a tool's inner agent is
    await later.attach_session(SnapshotSessionManager("s1", storage=storage), agent_id="helper")
    assert (later.agent_id, later.effect_scope) == ("helper", "s1/agent/helper")
    assert [m["content"][0]["text"] for m in later.messages] == ["hi", "one"]
    await later.invoke_async("again")  # and saves there
    reloaded = await Agent.create(
        model=ScriptedModel([]),
        agent_id="helper",
        session_manager=SnapshotSessionManager("s1", storage=storage),
    )
    assert [m["content"][0]["text"] for m in reloaded.messages] == ["hi", "one", "again", "two"]
    with pytest.raises(ConfigurationError, match="already has a session manager"):
        await later.attach_session(SnapshotSessionManager("s2", storage=storage))
    with pytest.raises(ConfigurationError, match="must be a session manager"):
        await Agent(model=ScriptedModel([])).attach_session(object())  # type: ignore[arg-type]


async def test_pending_tools_is_the_ledger_of_an_interrupted_turn() -> None:
    @tool(context=True)
    def approve(tool_context: ToolContext) -> str:
        """Ask for approval."""
        return str(tool_context.interrupt("approval", "may I?"))

    agent = Agent(model=ScriptedModel([ToolCall("approve", {}, "call-1"), "approved"]), tools=[approve])
    assert agent.pending_tools is None
    result = await agent.invoke_async("go")
    assert result.stop_reason == "interrupt"
    pending = agent.pending_tools
    assert isinstance(pending, PendingTools)
    assert [use["toolUseId"] for use in pending.tool_uses] == ["call-1"]
    assert [i.name for i in pending.open_interrupts()] == ["approval"]
    assert agent.open_interrupts() == pending.open_interrupts()
    answered = await agent.invoke_async([result.interrupts[0].to_response("yes")])
    assert str(answered) == "approved"
    assert agent.pending_tools is None


def test_before_and_after_tool_call_hooks_still_see_every_call() -> None:
    agent = scripted_turn()
    seen: list[str] = []
    agent.hooks.add_callback(BeforeToolCall, lambda event: seen.append(f"before {event.tool_use['name']}"))
    agent.hooks.add_callback(AfterToolCall, lambda event: seen.append(f"after {event.result['status']}"))
    agent("look k up")
    assert seen == ["before lookup", "after success"]
