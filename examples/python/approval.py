"""Human-in-the-loop: a draft waits for a person's approval before it is published (Python version of
examples/graphs/approval.yaml). The first call stops with the question; a later call, here a new graph
on the same session as another process would build it, answers it and only the nodes after it run.
Run: python examples/python/approval.py"""

from __future__ import annotations

import tempfile

from orchestra import Agent, ScriptedModel
from orchestra.multiagent import Graph, GraphBuilder, NodeInput
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage


def ask_approval(node_input: NodeInput) -> dict[str, object]:
    """Stop the run until a human answers (an interrupt named "approval"); the answer decides."""
    draft = str(node_input.inputs["draft"])
    answer = node_input.interrupt("approval", reason={"draft": draft})
    return {"approved": answer == "yes", "answer": answer, "draft": draft}


def publish(node_input: NodeInput) -> str:
    decision = node_input.inputs["approve"]
    if not decision["approved"]:
        return f"not published: the answer was {decision['answer']!r}"
    return "published: " + decision["draft"]


def build(session_id: str | None = None, root: str = "./.orchestra") -> Graph:
    writer = Agent(
        name="writer",
        system_prompt="Write short release notes for the version in the task.",
        model=ScriptedModel(["Release notes: saves are faster, and runs wait for approvals."]),
    )
    builder = (
        GraphBuilder()
        .set_graph_id("approval")
        .add_node(writer, "draft")
        .add_node(ask_approval, "approve")
        .add_node(publish, "publish")
        .add_edge("draft", "approve")
        .add_edge("approve", "publish")
    )
    if session_id is not None:
        builder.set_session_manager(SnapshotSessionManager(session_id, storage=LocalFileStorage(root)))
    return builder.build()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as root:
        first = build("rel-1", root)("Release 2.4")
        question = first.interrupts[0]
        print(first.status.value, question.id, question.name, question.reason)
        # Later, anywhere: the same session, and the answer to the open question.
        later = build("rel-1", root)
        result = later([question.to_response("yes")])
        print(result.status.value, result.execution_order)
        print(result.output)
