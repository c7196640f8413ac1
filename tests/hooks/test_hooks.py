import pytest

from orchestra import Agent, tool
from orchestra.hooks import (
    AfterInvocation,
    AfterToolCall,
    BeforeToolCall,
    HookProvider,
    HookRegistry,
    MessageAdded,
)
from orchestra.testing import EventRecorder, ScriptedModel, ToolCall


@tool
def ping() -> str:
    """Ping."""
    return "pong"


def test_event_order_of_an_invocation_with_a_tool_call():
    recorder = EventRecorder()
    agent = Agent(model=ScriptedModel([ToolCall("ping"), "done"]), tools=[ping], hooks=[recorder])
    agent("go")
    assert recorder.names == [
        "AgentInitialized",
        "BeforeInvocation",
        "MessageAdded",
        "BeforeModelCall",
        "AfterModelCall",
        "MessageAdded",
        "BeforeToolCall",
        "AfterToolCall",
        "MessageAdded",
        "BeforeModelCall",
        "AfterModelCall",
        "MessageAdded",
        "AfterInvocation",
    ]
    after = recorder.of_type(AfterInvocation)[0]
    assert str(after.result) == "done"
    assert after.exception is None


def test_after_invocation_sees_the_exception():
    recorder = EventRecorder(AfterInvocation)
    agent = Agent(model=ScriptedModel([]), hooks=[recorder])
    with pytest.raises(Exception, match="no reply left"):
        agent("x")
    assert "no reply left" in str(recorder.events[0].exception)


def test_before_tool_call_can_cancel_and_after_tool_call_can_replace_the_result():
    class Guard:
        def register_hooks(self, registry: HookRegistry) -> None:
            registry.add_callback(BeforeToolCall, self.before)
            registry.add_callback(AfterToolCall, self.after)

        async def before(self, event: BeforeToolCall) -> None:
            if event.tool_use["input"].get("forbidden"):
                event.cancel = "not allowed"

        def after(self, event: AfterToolCall) -> None:
            if event.result["status"] == "success":
                event.result = {**event.result, "content": [{"text": "PONG"}]}

    @tool
    def guarded(forbidden: bool = False) -> str:
        """Guarded."""
        return "pong"

    agent = Agent(
        model=ScriptedModel([[ToolCall("guarded", {"forbidden": True}), ToolCall("guarded")], "ok"]),
        tools=[guarded],
        hooks=[Guard()],
    )
    assert isinstance(Guard(), HookProvider)
    agent("go")
    results = [b["toolResult"] for b in agent.messages[2]["content"]]
    assert results[0]["status"] == "error"
    assert "cancelled: not allowed" in results[0]["content"][0]["text"]
    assert results[1]["content"] == [{"text": "PONG"}]


async def test_after_events_run_in_reverse_registration_order():
    order = []
    registry = HookRegistry()
    registry.add_callback(AfterInvocation, lambda e: order.append("first"))
    registry.add_callback(AfterInvocation, lambda e: order.append("second"))
    registry.add_callback(MessageAdded, lambda e: order.append("m1"))
    registry.add_callback(MessageAdded, lambda e: order.append("m2"))
    await registry.invoke(MessageAdded(agent=None, message={}))  # type: ignore[arg-type]
    await registry.invoke(AfterInvocation(agent=None, invocation_state={}))  # type: ignore[arg-type]
    assert order == ["m1", "m2", "second", "first"]


def test_registry_rejects_non_events():
    with pytest.raises(TypeError, match="HookEvent subclasses"):
        HookRegistry().add_callback(dict, print)  # type: ignore[arg-type]


def test_after_tool_call_sees_what_a_function_tool_raised():
    @tool
    def broken() -> str:
        """Always fails."""
        raise ValueError("no such account")

    recorder = EventRecorder(AfterToolCall)
    agent = Agent(model=ScriptedModel([ToolCall("broken", {}), "sorry"]), tools=[broken], hooks=[recorder])
    agent("go")
    after = recorder.of_type(AfterToolCall)[0]
    assert after.result["status"] == "error"  # the model still gets an error result
    assert isinstance(after.exception, ValueError)
    assert str(after.exception) == "no such account"
