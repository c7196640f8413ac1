"""Quickstart: one agent with a tool and the three kinds of state, offline (a scripted model).

Run it with ``python examples/quickstart.py``. Replace the ScriptedModel with a real model
(``Agent(model="openai:gpt-4o-mini")`` or ``ORCHESTRA_MODEL=...``) and it works unchanged.
"""

from __future__ import annotations

from orchestra import Agent, ScriptedModel, ToolCall, ToolContext, tool


@tool(context=True)
def track_user_action(action: str, tool_context: ToolContext) -> str:
    """Track user actions in agent state.

    Args:
        action: The action to track
    """
    count = (tool_context.agent.state.get("action_count") or 0) + 1
    tool_context.agent.state.set("action_count", count)
    tool_context.agent.state.set("last_action", action)
    user = tool_context.invocation_state.get("user_id", "unknown")
    return f"Action '{action}' recorded for {user}. Total actions: {count}"


def main() -> None:
    model = ScriptedModel(
        [
            ToolCall("track_user_action", {"action": "login"}),
            "Recorded your login.",
            ToolCall("track_user_action", {"action": "view profile"}),
            "Recorded that you viewed your profile.",
        ]
    )
    agent = Agent(model=model, tools=[track_user_action], state={"action_count": 0}, name="tracker")
    agent("Track that I logged in", invocation_state={"user_id": "u-1"})
    result = agent("Track that I viewed my profile", invocation_state={"user_id": "u-1"})
    print(f"agent said: {result}")
    print(f"actions taken: {agent.state.get('action_count')}, last: {agent.state.get('last_action')}")
    print(f"messages in the history: {len(agent.messages)}")
    print(f"tokens used by the last call: {result.metrics.usage.total_tokens}")


if __name__ == "__main__":
    main()
