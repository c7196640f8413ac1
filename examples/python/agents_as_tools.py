"""Agents and pipelines as tools: an assistant delegates research to an agent and review to a Graph.
Run: python examples/python/agents_as_tools.py"""

from __future__ import annotations

from orchestra import Agent, ScriptedModel, ToolCall
from orchestra.multiagent import GraphBuilder


def build() -> Agent:
    researcher = Agent(
        name="researcher",
        description="Finds the facts about a topic.",
        model=ScriptedModel(["Tides are caused mainly by the Moon's gravity."]),
    )
    review = GraphBuilder().set_graph_id("review")
    review.add_node(Agent(name="checker", model=ScriptedModel(["The note is accurate."])), "checker")
    reviewer = review.build()
    return Agent(
        name="assistant",
        # A real model would choose the calls; this stand-in delegates twice, then answers.
        model=ScriptedModel(
            [
                ToolCall("researcher", {"input": "What causes tides?"}),
                ToolCall("review", {"input": "Check: tides come from the Moon's gravity."}),
                "Tides come mainly from the Moon's gravity (checked by the review pipeline).",
            ]
        ),
        tools=[researcher.as_tool(), reviewer.as_tool(description="Reviews a short note.")],
    )


if __name__ == "__main__":
    assistant = build()
    result = assistant("Write one line on what causes tides, and have it reviewed.")
    for message in assistant.messages:
        for block in message["content"]:
            if "toolResult" in block:
                print("tool said:", block["toolResult"]["content"][0]["text"])
    print("assistant:", result)
