"""Deterministic steps used by the example pipelines (named in the YAML by import path)."""

from __future__ import annotations

from typing import Any

from orchestra.multiagent import NodeInput


def split_topics(node_input: NodeInput) -> dict[str, list[str]]:
    """Split the task into the aspects the analysts look at."""
    node_input.state.set("aspects", ["cost", "risk", "speed"])
    return {"task": node_input.task, "aspects": ["cost", "risk", "speed"]}


DOCUMENTS = [
    "Spot instances cost up to 90% less. They can be reclaimed with two minutes' notice.",
    "Checkpointing lets a batch job resume. It needs storage that outlives the instance.",
    "Reserved capacity suits steady load. It is paid whether it is used or not.",
    "Queues smooth bursts of work. A slow consumer makes them grow without bound.",
    "Retries hide passing faults. Without a limit they turn an outage into a storm.",
    "Budgets cap what a run may spend. A run that reaches one stops and can resume.",
]


def split_documents(node_input: NodeInput) -> list[str]:
    """The documents to summarise: how many is known only when the run gets here."""
    return DOCUMENTS


def first_sentence(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    """A stand-in summarising model: the first sentence of the item it was given."""
    item = messages[-1]["content"][-1]["text"].rsplit("\n", 1)[-1]
    return item.split(". ")[0].rstrip(".") + "."


def fetch_prices(node_input: NodeInput) -> str:
    """A flaky upstream: its first two attempts time out (the retry policy tries again)."""
    if node_input.attempt < 3:
        raise ConnectionError(f"the price service timed out (attempt {node_input.attempt})")
    return "spot: $0.031/h, on-demand: $0.096/h"


def ask_approval(node_input: NodeInput) -> dict[str, Any]:
    """Stop the run until a human answers (an interrupt named "approval"); the answer decides."""
    draft = str(node_input.inputs["draft"])
    answer = node_input.interrupt("approval", reason={"draft": draft})
    return {"approved": answer == "yes", "answer": answer, "draft": draft}


def publish(node_input: NodeInput) -> str:
    """Publish what was approved (here: say so)."""
    decision = node_input.inputs["approve"]
    if not decision["approved"]:
        return f"not published: the answer was {decision['answer']!r}"
    return "published: " + decision["draft"]
