"""``Orchestrator`` is what the modules below ``MultiAgentBase`` (nodes, maps, the meter, hook events)
know of a Graph or Swarm; mypy checks that ``MultiAgentBase`` satisfies it wherever base.py hands itself
to them, and this checks the runtime side: node kinds are told apart by it."""

from __future__ import annotations

from orchestra import Agent, ScriptedModel
from orchestra.multiagent import Graph, GraphBuilder, Map, Orchestrator, Swarm
from orchestra.multiagent.nodes import Node


def step(task):
    return "done"


def test_graphs_and_swarms_are_orchestrators_and_nothing_else_is():
    graph = GraphBuilder().add_node(step, "a").build()
    swarm = Swarm([Agent(name="a", model=ScriptedModel(["hi"]))])
    assert isinstance(graph, Orchestrator)
    assert isinstance(swarm, Orchestrator)
    for other in (Agent(model=ScriptedModel([])), Map(step), step, "text"):
        assert not isinstance(other, Orchestrator), other


def test_a_nested_orchestrator_is_an_orchestrator_node():
    inner = GraphBuilder().add_node(step, "a").build()
    assert Node("inner", inner).kind == "orchestrator"
    assert Node("fn", step).kind == "function"
    assert Node("many", Map(step)).kind == "map"
    outer = Graph({"inner": inner, "after": step}, [("inner", "after")])
    assert outer("go").status.value == "completed"
