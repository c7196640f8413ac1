"""A run budget: the run stops before the model call it cannot afford, then resumes with a larger
budget (Python version of examples/graphs/budgeted_review.yaml). Run: python examples/python/budgeted_review.py"""

from __future__ import annotations

from orchestra import Agent, ScriptedModel
from orchestra.multiagent import Budget, Graph
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage


def agent(name: str, prompt: str, reply: str) -> Agent:
    return Agent(name=name, system_prompt=prompt, model=ScriptedModel([reply], follow_history=True))


def build(budget: Budget | None = None, session: SnapshotSessionManager | None = None) -> Graph:
    researcher = agent(
        "researcher",
        "You research a topic and list the key facts, one per line.",
        "- Agent runs call paid APIs for minutes.\n- A crash loses unsaved work.",
    )
    writer = agent(
        "writer",
        "You write a short, clear note from the facts you are given.",
        "Durable execution saves each step, so a crashed agent run resumes and never pays twice.",
    )
    reviewer = agent("reviewer", "Answer APPROVED if the note is clear.", "APPROVED")
    return Graph(
        [researcher, writer, reviewer],
        [("researcher", "writer"), ("writer", "reviewer")],
        id="budgeted-review",
        budget=budget or Budget(model_calls=10, tokens=20_000),
        budgets={"writer": Budget(model_calls=3)},
        session_manager=session,
    )


if __name__ == "__main__":
    storage = InMemoryStorage()
    task = "Write a short note on why durable execution matters for AI agents."
    tight = build(Budget(model_calls=2), SnapshotSessionManager("b1", storage=storage))
    stopped = tight(task)  # interrupted: BudgetExceeded: ... spent its model_calls budget (2 of 2)
    larger = build(Budget(model_calls=10), SnapshotSessionManager("b1", storage=storage))
    result = larger()  # resumes where it stopped: the two nodes that ran do not run again
    print(result.status.value, result.execution_order, larger.run["spent"])
    print(f"  first {stopped.status.value}: {stopped.reason}")
    print(result.output)
