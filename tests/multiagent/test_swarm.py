"""Swarm: handoffs end the turn, shared context, the two limits, repetition, conversations per agent."""

from orchestra import Agent
from orchestra.multiagent import HandoffEvent, Status, Swarm
from orchestra.testing import FunctionModel, ScriptedModel, ToolCall, collect


def handoff(to, message="over to you", context=None):
    payload = {"agent_name": to, "message": message}
    if context is not None:
        payload["context"] = context
    return ToolCall("handoff_to_agent", payload)


def test_a_handoff_ends_the_turn_without_another_model_call():
    triage_model = ScriptedModel([handoff("billing", "refund order 42", {"order": 42})])
    billing_model = ScriptedModel(["Refunded order 42."])
    swarm = Swarm(
        [
            Agent(name="triage", model=triage_model, description="routes requests"),
            Agent(name="billing", model=billing_model, description="handles money"),
        ]
    )
    result = swarm("I want my money back")
    assert result.status == Status.COMPLETED
    assert str(result) == "Refunded order 42."
    assert len(triage_model.requests) == 1
    assert result.node_history == ["triage", "billing"]
    assert result.handoffs == [{"from": "triage", "to": "billing", "message": "refund order 42"}]
    assert result.shared_context == {"triage": {"order": 42}}
    billing_prompt = billing_model.requests[0].last_text
    assert billing_prompt.startswith("refund order 42")
    assert "Original task: I want my money back" in billing_prompt
    assert 'Shared context: {"triage": {"order": 42}}' in billing_prompt
    # the handing-off agent's history stays valid: tool result, then an assistant message
    triage = swarm.nodes["triage"].agent
    assert [m["role"] for m in triage.messages] == ["user", "assistant", "user", "assistant"]
    assert triage.messages[-1]["content"][0]["text"] == "Handed off to billing."


def test_the_handoff_tool_describes_the_other_agents():
    a = Agent(name="a", model=ScriptedModel(["x"]), description="first")
    b = Agent(name="b", model=ScriptedModel(["x"]), description="second")
    Swarm([a, b])
    spec = a.tool_registry.get("handoff_to_agent").spec
    assert "b: second" in spec["description"]
    assert "a: first" not in spec["description"]
    assert set(spec["inputSchema"]["json"]["required"]) == {"agent_name", "message"}


def test_bad_handoffs_are_errors_the_model_sees_and_can_fix():
    model = ScriptedModel(
        [
            [handoff("nobody"), handoff("a"), handoff("b", context={"bad": float("nan")})],
            handoff("b", "for real"),
        ]
    )
    swarm = Swarm([Agent(name="a", model=model), Agent(name="b", model=ScriptedModel(["b answers"]))])
    result = swarm("task")
    assert result.status == Status.COMPLETED
    errors = [b["toolResult"]["content"][0]["text"] for b in swarm.nodes["a"].agent.messages[2]["content"]]
    assert "no agent named 'nobody'" in errors[0]
    assert "cannot hand off to yourself" in errors[1]
    assert "context must be JSON" in errors[2]


def cycle_models(names, handoffs):
    """Agents that pass the task around ``handoffs`` times, then answer."""

    def reply_for(name):
        def reply(messages, specs):
            count = (
                messages[-1]["content"][-1]["text"].count(" -> ") + 1
                if "Agents so far" in messages[-1]["content"][-1]["text"]
                else 0
            )
            if count >= handoffs:
                return f"{name} answers after {count} handoffs"
            nxt = names[(names.index(name) + 1) % len(names)]
            return handoff(nxt, f"turn {count}")

        return reply

    return [Agent(name=n, model=FunctionModel(reply_for(n))) for n in names]


def test_max_handoffs_and_max_iterations_are_different_limits():
    result = Swarm(cycle_models(["a", "b", "c"], 10), max_handoffs=4, max_iterations=50)("task")
    assert result.status == Status.FAILED
    assert result.reason.startswith("max_handoffs limit (4) reached")
    result = Swarm(cycle_models(["a", "b", "c"], 10), max_handoffs=50, max_iterations=3)("task")
    assert result.status == Status.FAILED
    assert result.reason.startswith("max_iterations limit (3) reached")
    result = Swarm(cycle_models(["a", "b", "c"], 10), max_handoffs=10, max_iterations=11)("task")
    assert result.status == Status.COMPLETED
    assert len(result.handoffs) == 10
    assert result.execution_count == 11


def test_repetitive_handoffs_are_detected():
    swarm = Swarm(
        cycle_models(["a", "b", "c"], 100),
        max_handoffs=100,
        max_iterations=100,
        repetitive_handoff_detection_window=4,
        repetitive_handoff_min_unique_agents=3,
    )
    ping = Swarm(
        [
            Agent(name="ping", model=FunctionModel(lambda m, s: handoff("pong"))),
            Agent(name="pong", model=FunctionModel(lambda m, s: handoff("ping"))),
            Agent(name="judge", model=ScriptedModel(["never called"])),
        ],
        max_handoffs=100,
        max_iterations=100,
        repetitive_handoff_detection_window=4,
        repetitive_handoff_min_unique_agents=3,
    )
    result = ping("task")
    assert result.status == Status.FAILED
    assert result.reason.startswith("repetitive handoffs: the last 4 turns involved only ping, pong")
    varied = swarm("task")  # three agents in turn are not a ping-pong
    assert "repetitive" not in (varied.reason or "")


def test_each_agent_keeps_its_conversation_across_its_turns():
    a_model = ScriptedModel([handoff("b", "first"), "a finishes"])
    b_model = ScriptedModel([handoff("a", "back to a")])
    swarm = Swarm([Agent(name="a", model=a_model), Agent(name="b", model=b_model)])
    result = swarm("task")
    assert result.node_history == ["a", "b", "a"]
    assert len(a_model.requests[1].messages) == 5  # its first turn (4 messages) and the new input


def test_entry_point_and_timeouts():
    swarm = Swarm(
        [Agent(name="a", model=ScriptedModel(["from a"])), Agent(name="b", model=ScriptedModel(["from b"]))],
        entry_point="b",
    )
    assert str(swarm("x")) == "from b"
    slow = Swarm([Agent(name="slow", model=ScriptedModel(["late"], latency=1.0))], node_timeout=0.1)
    result = slow("x")
    assert result.status == Status.FAILED
    assert result.reason == "agent 'slow' failed: node_timeout (0.1s) exceeded by agent 'slow'"
    slower = Swarm([Agent(name="slow", model=ScriptedModel(["late"], latency=1.0))], execution_timeout=0.1)
    assert slower("x").reason == "execution_timeout (0.1s) exceeded"


async def test_streams_handoff_events():
    swarm = Swarm(
        [
            Agent(name="a", model=ScriptedModel([handoff("b", "go")])),
            Agent(name="b", model=ScriptedModel(["ok"])),
        ]
    )
    events = await collect(swarm.stream_async("x"))
    handoffs = [e for e in events if isinstance(e, HandoffEvent)]
    assert handoffs == [HandoffEvent("a", "b", "go")]


async def test_a_fresh_run_resets_the_agents():
    swarm = Swarm([Agent(name="solo", model=ScriptedModel(["one", "two"]))])
    await swarm.invoke_async("first")
    await swarm.invoke_async("second")
    assert len(swarm.nodes["solo"].agent.messages) == 2
    assert swarm.status == Status.COMPLETED
