"""A structured output comes back as its model after a resume, whichever node gave it: an agent node, a
nested Swarm (whose last agent has the output type), a nested Graph (one terminal or several), nested
twice, a map of agents (whose items a session could not even save before). The run stops at a question after the output is saved; a new process (new objects, the same
storage) answers it, and the condition that reads the output then sees the model, as on a fresh run."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from orchestra import Agent
from orchestra.models import FunctionModel, ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.multiagent import Graph, GraphBuilder, Map, NodeInput, Status, Swarm
from orchestra.session import SnapshotSessionManager
from orchestra.storage import LocalFileStorage


class Invoice(BaseModel):
    number: str
    total: float


class Refund(BaseModel):
    reason: str


def extract() -> Agent:
    reply = ToolCall("Invoice", {"number": "S-1", "total": 250.0})
    return Agent(name="extract", model=ScriptedModel([reply], follow_history=True), output_type=Invoice)


def refund() -> Agent:
    reply = ToolCall("Refund", {"reason": "late"})
    return Agent(name="refund", model=ScriptedModel([reply], follow_history=True), output_type=Refund)


def swarm() -> Swarm:
    hand_off = ToolCall("handoff_to_agent", {"agent_name": "extract", "message": "yours"})
    triage = Agent(name="triage", model=ScriptedModel([hand_off], follow_history=True))
    return Swarm([triage, extract()])


def invoices() -> Map:
    """One agent per invoice number, each answering an ``Invoice`` (a map's items)."""

    def reply(messages: list[dict[str, Any]], specs: list[dict[str, Any]]) -> ToolCall:
        number = messages[0]["content"][0]["text"].splitlines()[-1]
        return ToolCall("Invoice", {"number": number, "total": 10.0 * len(number)})

    agent = Agent(name="reader", model=FunctionModel(reply), output_type=Invoice)
    return Map(agent, over=lambda: ["S-1", "S-22"])


def one_terminal() -> Graph:
    return GraphBuilder().add_node(swarm(), "team").build()


def two_terminals() -> Graph:
    return GraphBuilder().add_node(extract(), "extract").add_node(refund(), "refund").build()


# What the node "work" is, and what its output must be (on a fresh run and after a resume).
CASES: dict[str, tuple[Any, Any]] = {
    "agent node": (extract, Invoice(number="S-1", total=250.0)),
    "nested swarm": (swarm, Invoice(number="S-1", total=250.0)),
    "swarm in a nested graph": (one_terminal, Invoice(number="S-1", total=250.0)),
    "map of agents": (invoices, [Invoice(number="S-1", total=30.0), Invoice(number="S-22", total=40.0)]),
    "nested graph with two terminals": (
        two_terminals,
        {"extract": Invoice(number="S-1", total=250.0), "refund": Refund(reason="late")},
    ),
}


def approve(node: NodeInput) -> str:
    return str(node.interrupt("approve", "pay it?"))


def pipeline(work: Any, storage: LocalFileStorage, seen: list[Any]) -> Graph:
    def condition(state: Any) -> bool:
        seen.append(state.output("work"))
        return True

    return (
        GraphBuilder()
        .add_node(work(), "work")
        .add_node(approve, "approve")
        .add_node(lambda: "paid", "pay")
        .add_edge("work", "approve")
        .add_edge("approve", "pay", condition=condition)
        .set_session_manager(SnapshotSessionManager("s", storage=storage))
        .build()
    )


@pytest.mark.parametrize("case", list(CASES))
async def test_a_structured_output_is_its_model_again_after_a_resume(tmp_path, case):
    work, expected = CASES[case]
    storage = LocalFileStorage(tmp_path)
    first = await pipeline(work, storage, []).invoke_async("read the invoice")
    assert first.status == Status.INTERRUPTED
    assert first.results["work"].output == expected  # the fresh run's

    seen: list[Any] = []
    answer = first.interrupts[0].to_response("yes")
    resumed = await pipeline(work, storage, seen).invoke_async([answer])

    assert resumed.status == Status.COMPLETED, resumed.reason
    assert resumed.resumed
    assert seen == [expected]  # the condition's view, after the resume: models, not dicts
    assert_same_types(seen[0], expected)
    assert resumed.results["work"].output == expected
    assert_same_types(resumed.results["work"].output, expected)


def assert_same_types(got: Any, expected: Any) -> None:
    if isinstance(expected, list):
        assert isinstance(got, list)
        for got_item, expected_item in zip(got, expected, strict=True):
            assert_same_types(got_item, expected_item)
    elif isinstance(expected, dict):
        assert isinstance(got, dict)
        for key, value in expected.items():
            assert_same_types(got[key], value)
    else:
        assert type(got) is type(expected), (got, expected)


async def test_a_nested_run_says_which_node_gave_its_output():
    result = await GraphBuilder().add_node(one_terminal(), "outer").build().invoke_async("go")
    assert result.results["outer"].output_from == {"node": "team", "from": {"node": "extract"}}
