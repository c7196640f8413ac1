"""Structured output in orchestrators: conditions see the model, the run persists it as JSON and a
resumed run gets the model instance back; the same from YAML (output_type, output_schema, field tests)."""

import pytest
from pydantic import BaseModel

from orchestra import Agent
from orchestra.errors import OrchestraSpecError
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.multiagent import GraphBuilder, Status
from orchestra.session import SnapshotSessionManager
from orchestra.spec import load, parse_file
from orchestra.storage import LocalFileStorage


class Invoice(BaseModel):
    customer: str
    total: float


def extract_agent(total: float) -> Agent:
    reply = ToolCall("Invoice", {"customer": "ACME", "total": total})
    return Agent(name="extract", model=ScriptedModel([reply], follow_history=True), output_type=Invoice)


def graph_for(total: float, session=None, approve_replies=("approved",)):
    builder = GraphBuilder()
    builder.add_node(extract_agent(total), "extract")
    builder.add_node(
        Agent(name="approve", model=ScriptedModel(list(approve_replies), follow_history=True)), "approve"
    )
    builder.add_node(Agent(name="file", model=ScriptedModel(["filed"], follow_history=True)), "file")
    builder.add_edge("extract", "approve", condition=lambda state: state.output("extract").total > 100)
    builder.add_edge("extract", "file", condition=lambda state: state.output("extract").total <= 100)
    if session is not None:
        builder.set_session_manager(session)
    return builder.build()


@pytest.mark.parametrize(("total", "taken"), [(250.0, "approve"), (40.0, "file")])
async def test_conditions_see_the_structured_output(total, taken):
    result = await graph_for(total).invoke_async("read the invoice")
    assert result.status == Status.COMPLETED
    assert set(result.results) == {"extract", taken}
    assert result.results["extract"].output == Invoice(customer="ACME", total=total)
    # The next node's prompt carries the output as JSON.
    assert '"total":' in result.results["extract"].text


async def test_a_resumed_run_gets_the_model_instance_back(tmp_path):
    storage = LocalFileStorage(tmp_path)
    failing = graph_for(250.0, SnapshotSessionManager("s1", storage=storage), approve_replies=())
    first = await failing.invoke_async("read the invoice")
    assert first.status == Status.FAILED  # the approver's model has no reply: the run stops after extract
    resumed = graph_for(250.0, SnapshotSessionManager("s1", storage=storage))
    result = await resumed.invoke_async("read the invoice", resume_unfinished=True)
    assert result.status == Status.COMPLETED
    assert result.resumed
    assert isinstance(result.results["extract"].output, Invoice)
    assert result.results["extract"].output.total == 250.0


YAML = """
version: 1
kind: graph
id: triage
agents:
  - name: extract
    model: {provider: scripted, replies: [{tool: Ticket, input: {severity: high, score: 0.9}}]}
    output_schema:
      title: Ticket
      type: object
      properties:
        severity: {enum: [low, high]}
        score: {type: number}
      required: [severity, score]
  - name: page
    model: {provider: scripted, replies: [paged]}
  - name: queue
    model: {provider: scripted, replies: [queued]}
nodes:
  - {agent: extract}
  - {agent: page}
  - {agent: queue}
edges:
  - {from: extract, to: page, when: {field: severity, eq: high}}
  - {from: extract, to: queue, when: {field: score, lt: 0.5}}
"""


async def test_yaml_output_schema_and_field_conditions(tmp_path):
    path = tmp_path / "triage.yaml"
    path.write_text(YAML)
    graph = load(path)
    result = await graph.invoke_async("the disk is full")
    assert set(result.results) == {"extract", "page"}
    output = result.results["extract"].output
    assert (output.severity, output.score) == ("high", 0.9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "    output_schema:\n",
            "    output_type: tests.multiagent.test_structured_nodes:nothing\n    output_schema:\n",
        ),
        ("severity: {enum: [low, high]}", "severity: {type: date}"),
        ("{field: severity, eq: high}", "{field: severity, eq: high, gt: 1}"),
    ],
)
def test_yaml_mistakes_name_the_file_line_and_field(tmp_path, change, message):
    path = tmp_path / "triage.yaml"
    path.write_text(YAML.replace(change, message))
    with pytest.raises(OrchestraSpecError) as caught:
        parse_file(path)
    text = str(caught.value)
    assert "triage.yaml:" in text
    assert any(word in text for word in ("output_type", "output_schema", "when", "field"))
