"""Deterministic steps used by the example pipelines (named in the YAML by import path)."""

from __future__ import annotations

from orchestra.multiagent import NodeInput


def split_topics(node_input: NodeInput) -> dict[str, list[str]]:
    """Split the task into the aspects the analysts look at."""
    node_input.state.set("aspects", ["cost", "risk", "speed"])
    return {"task": node_input.task, "aspects": ["cost", "risk", "speed"]}
