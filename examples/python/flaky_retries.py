"""Retry policies: a flaky price service, tried again by the node's policy (Python version of
examples/graphs/flaky_retries.yaml). Run: python examples/python/flaky_retries.py"""

from __future__ import annotations

import sys
from pathlib import Path

from orchestra import Agent, ScriptedModel
from orchestra.multiagent import Graph, RetryPolicy

sys.path.insert(0, str(Path(__file__).parent.parent / "graphs"))
from pipeline_functions import fetch_prices


def build() -> Graph:
    advisor = Agent(
        name="advisor",
        system_prompt="You advise on infrastructure costs from the prices you are given.",
        model=ScriptedModel(
            ["Spot is a third of the on-demand price: move the batch jobs, with checkpoints."]
        ),
    )
    policy = RetryPolicy(max_attempts=3, initial_interval=0.2, backoff=2, retry_on=(ConnectionError,))
    return Graph(
        {"prices": fetch_prices, "advisor": advisor},
        [("prices", "advisor")],
        id="flaky-retries",
        retry={"prices": policy},
    )


if __name__ == "__main__":
    graph = build()
    result = graph("Should we move our batch jobs to spot instances?")
    print(result.status.value, result.execution_order)
    for attempt in graph.failed_attempts("prices"):
        print(
            f"  attempt {attempt['attempt']} failed: {attempt['error']}; retried after {attempt['retry_in']} s"
        )
    print(result.output)
