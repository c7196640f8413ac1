"""research -> write -> review, looping back to the writer until the reviewer approves (Python version
of examples/graphs/review_loop.yaml). Run: python examples/python/review_loop.py"""

from __future__ import annotations

from orchestra import Agent, ScriptedModel
from orchestra.multiagent import GraphBuilder, GraphState
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage


def needs_revision(state: GraphState) -> bool:
    return "REVISE" in state.text("reviewer")


def build(session_id: str | None = None, root: str = "./.orchestra") -> object:
    researcher = Agent(
        name="researcher",
        system_prompt="You research a topic and list the key facts, one per line.",
        model=ScriptedModel(
            ["- Agent runs take minutes and call paid APIs.\n- A crash halfway loses every completed step."],
            follow_history=True,
        ),
    )
    writer = Agent(
        name="writer",
        system_prompt="You write a short, clear note from the facts you are given. Revise it when asked.",
        model=ScriptedModel(
            [
                "Agents crash. Save progress.",
                "Long agent runs call paid APIs for minutes; a crash halfway throws that work away. "
                "Durable execution saves each completed step, so a run resumes where it stopped.",
            ],
            follow_history=True,
        ),
    )
    reviewer = Agent(
        name="reviewer",
        system_prompt='Answer "APPROVED" if the draft is clear and complete, else "REVISE:" and what to change.',
        model=ScriptedModel(["REVISE: explain the cost of a crash.", "APPROVED"], follow_history=True),
    )
    builder = (
        GraphBuilder()
        .set_graph_id("review-loop")
        .add_node(researcher)
        .add_node(writer)
        .add_node(reviewer)
        .add_edge("researcher", "writer")
        .add_edge("writer", "reviewer")
        .add_edge("reviewer", "writer", needs_revision)
        .set_max_node_executions(8)
    )
    if session_id is not None:
        builder.set_session_manager(SnapshotSessionManager(session_id, storage=LocalFileStorage(root)))
    return builder.build()


if __name__ == "__main__":
    graph = build()
    result = graph("Write a short note on why durable execution matters for AI agents.")  # type: ignore[operator]
    print(result.status.value, result.execution_order)
    print(result.results["writer"].output)
