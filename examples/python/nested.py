"""A graph with a swarm as one node (Python version of examples/graphs/nested.yaml).
Run: python examples/python/nested.py"""

from __future__ import annotations

import sys
from pathlib import Path

from orchestra import Agent, ScriptedModel
from orchestra.multiagent import Graph

sys.path.insert(0, str(Path(__file__).parent))
from support_swarm import build as build_support


def build() -> Graph:
    intake = Agent(
        name="intake", model=ScriptedModel(["A customer reports a duplicate subscription charge."])
    )
    follow_up = Agent(
        name="follow_up", model=ScriptedModel(["Refund issued for a duplicate charge; no further action."])
    )
    return Graph(
        {"intake": intake, "support": build_support(), "follow_up": follow_up},
        edges=[("intake", "support"), ("support", "follow_up")],
        id="nested",
    )


if __name__ == "__main__":
    result = build()("I was charged twice for my subscription this month.")
    print(result.status.value, result.execution_order)
    print(result.output)
