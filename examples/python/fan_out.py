"""Split a question into aspects, three analysts in parallel, an aggregator (Python version of
examples/graphs/fan_out.yaml). Run: python examples/python/fan_out.py"""

from __future__ import annotations

from orchestra import Agent, ScriptedModel
from orchestra.multiagent import Graph, NodeInput


def split_topics(node_input: NodeInput) -> dict[str, object]:
    node_input.state.set("aspects", ["cost", "risk", "speed"])
    return {"task": node_input.task, "aspects": ["cost", "risk", "speed"]}


def analyst(name: str, reply: str) -> Agent:
    return Agent(
        name=name, model=ScriptedModel([reply], latency=0.3), system_prompt=f"You analyse the {name}."
    )


def build() -> Graph:
    analysts = [
        analyst("cost_analyst", "Spot capacity is 60-90% cheaper; savings dominate for batch work."),
        analyst("risk_analyst", "Instances can be reclaimed with two minutes' notice; jobs must checkpoint."),
        analyst("speed_analyst", "Throughput is unchanged if jobs resume from checkpoints."),
    ]
    aggregator = Agent(
        name="aggregator", model=ScriptedModel(["Move to spot instances, after making jobs resumable."])
    )
    edges = [("split", a.name) for a in analysts] + [(a.name, "aggregator") for a in analysts]
    return Graph(
        {"split": split_topics, **{a.name: a for a in analysts}, "aggregator": aggregator},
        edges=edges,
        id="fan-out",
        max_concurrency=3,
    )


if __name__ == "__main__":
    result = build()("Should we move our batch jobs to spot instances?")
    print(result.status.value, result.execution_order)
    print(result.output)
