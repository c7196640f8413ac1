"""Triage, billing and technical agents handing off (Python version of examples/graphs/support_swarm.yaml).
Run: python examples/python/support_swarm.py"""

from __future__ import annotations

from orchestra import Agent, ScriptedModel, ToolCall
from orchestra.multiagent import Swarm


def build() -> Swarm:
    triage = Agent(
        name="triage",
        description="Reads the request and hands it to the right specialist.",
        model=ScriptedModel(
            [
                ToolCall(
                    "handoff_to_agent",
                    {
                        "agent_name": "billing",
                        "message": "The customer reports a double charge on their subscription.",
                        "context": {"category": "billing", "priority": "high"},
                    },
                )
            ],
            follow_history=True,
        ),
    )
    billing = Agent(
        name="billing",
        description="Handles charges, refunds and invoices.",
        model=ScriptedModel(["I found the duplicate charge and refunded it."], follow_history=True),
    )
    technical = Agent(
        name="technical", description="Handles bugs, errors and outages.", model=ScriptedModel([])
    )
    return Swarm(
        [triage, billing, technical], entry_point="triage", max_handoffs=5, max_iterations=10, id="support"
    )


if __name__ == "__main__":
    result = build()("I was charged twice for my subscription this month.")
    print(result.status.value, result.node_history, result.shared_context)
    print(result.output)
