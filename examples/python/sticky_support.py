"""A sticky swarm: the next invocation starts at the agent that answered the last one, and each agent
keeps its own history (Python version of examples/graphs/sticky_support.yaml).
Run: python examples/python/sticky_support.py"""

from __future__ import annotations

from orchestra import Agent, ScriptedModel, ToolCall
from orchestra.multiagent import Swarm
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage


def build(session: SnapshotSessionManager | None = None) -> Swarm:
    triage = Agent(
        name="triage",
        description="Reads the request and hands it to the right specialist.",
        model=ScriptedModel(
            [
                ToolCall(
                    "handoff_to_agent",
                    {"agent_name": "billing", "message": "The customer reports a double charge."},
                )
            ],
            follow_history=True,
        ),
    )
    billing = Agent(
        name="billing",
        description="Handles charges, refunds and invoices.",
        model=ScriptedModel(
            [
                "I found the duplicate charge and refunded it.",
                "The corrected invoice is in your account; it shows the refund I made.",
            ],
            follow_history=True,
        ),
    )
    technical = Agent(
        name="technical", description="Handles bugs, errors and outages.", model=ScriptedModel([])
    )
    return Swarm(
        [triage, billing, technical],
        entry_point="triage",
        id="sticky-support",
        resume_from="last_active",
        history="private",
        session_manager=session,
    )


if __name__ == "__main__":
    storage = InMemoryStorage()
    first = build(SnapshotSessionManager("chat-1", storage=storage))("I was charged twice this month.")
    second = build(SnapshotSessionManager("chat-1", storage=storage))(
        "And the invoice?"
    )  # a new process, say
    print(second.status.value, first.node_history, "then", second.node_history)
    print(first.output)
    print(second.output)
