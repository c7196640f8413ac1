from orchestra import Agent, ToolContext, tool
from orchestra.hooks import AfterInvocation, AfterToolCall, BeforeInvocation, BeforeModelCall, BeforeToolCall
from orchestra.testing import ScriptedModel, ToolCall


def test_one_dict_by_reference_through_hooks_tools_and_cycles():
    seen: list[tuple[str, int]] = []

    @tool(context=True)
    def step(tool_context: ToolContext) -> str:
        """Count the steps in the invocation state."""
        tool_context.invocation_state["steps"] = tool_context.invocation_state.get("steps", 0) + 1
        seen.append(("tool", id(tool_context.invocation_state)))
        return "stepped"

    class Watcher:
        def register_hooks(self, registry):
            for event_type in (
                BeforeInvocation,
                BeforeModelCall,
                BeforeToolCall,
                AfterToolCall,
                AfterInvocation,
            ):
                registry.add_callback(event_type, self.record)

        def record(self, event):
            seen.append((type(event).__name__, id(event.invocation_state)))
            event.invocation_state.setdefault("hook_calls", 0)
            event.invocation_state["hook_calls"] += 1

    model = ScriptedModel([ToolCall("step"), ToolCall("step"), "done"])
    agent = Agent(model=model, tools=[step], hooks=[Watcher()])
    state = {"request_id": "r-42", "user_id": "u-1"}
    result = agent("go", invocation_state=state)
    assert result.state is state
    assert {ident for _, ident in seen} == {id(state)}
    assert state["steps"] == 2  # across two loop cycles
    assert state["hook_calls"] == len([s for s in seen if s[0] != "tool"])
    # never sent to the model
    assert "r-42" not in repr([r.messages for r in model.requests])


def test_default_is_a_fresh_empty_dict_per_invocation():
    agent = Agent(model=ScriptedModel(["a", "b"]))
    first = agent("x")
    second = agent("y")
    assert first.state == {}
    assert second.state == {}
    assert first.state is not second.state
