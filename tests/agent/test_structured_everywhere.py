"""Structured output wherever a run can take it: Swarms and Graphs with sessions, aliased fields, rich
pydantic types, and output types whose schema is not an object (wrapped before anything runs)."""

import datetime as dt
import decimal
import enum
import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from orchestra import Agent
from orchestra.agent.structured import OutputTool
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.multiagent import GraphBuilder, Status, Swarm
from orchestra.session import SnapshotSessionManager, admin
from orchestra.storage import LocalFileStorage


class Invoice(BaseModel):
    customer: str
    total: float


class Mail(BaseModel):
    """A model with an aliased field: ``from`` is a Python keyword."""

    from_: str = Field(alias="from")
    to: str


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Line(BaseModel):
    sku: str
    amount: decimal.Decimal


class Rich(BaseModel):
    """Every pydantic type a user reaches for."""

    model_config = ConfigDict(populate_by_name=True)

    when: dt.date
    at: dt.datetime
    id: uuid.UUID
    colour: Colour
    kind: Literal["a", "b"]
    lines: list[Line]
    tags: set[str]
    pair: tuple[int, str]
    score: Annotated[float, Field(ge=0, le=1)]
    note: str | None = None


RICH_INPUT = {
    "when": "2026-01-02",
    "at": "2026-01-02T03:04:05Z",
    "id": "12345678-1234-5678-1234-567812345678",
    "colour": "blue",
    "kind": "a",
    "lines": [{"sku": "x", "amount": "1.50"}],
    "tags": ["t"],
    "pair": [1, "one"],
    "score": 0.5,
}


def extracting(name, output_type, payload, *, then_hand_off_to=None):
    replies = []
    if then_hand_off_to:
        replies.append(ToolCall("handoff_to_agent", {"agent_name": then_hand_off_to, "message": "yours"}))
    replies.append(ToolCall(output_type.__name__, payload))
    return Agent(name=name, model=ScriptedModel(replies, follow_history=True), output_type=output_type)


def triage():
    return Agent(
        name="triage",
        model=ScriptedModel(
            [ToolCall("handoff_to_agent", {"agent_name": "extract", "message": "yours"})], follow_history=True
        ),
    )


def swarm(output_type=Invoice, payload=None, session=None):
    payload = payload or {"customer": "ACME", "total": 12.5}
    return Swarm([triage(), extracting("extract", output_type, payload)], session_manager=session)


async def test_a_swarm_with_a_session_whose_last_agent_has_an_output_type(tmp_path):
    session = SnapshotSessionManager("s", storage=LocalFileStorage(tmp_path))
    result = await swarm(session=session).invoke_async("read it")
    assert result.status == Status.COMPLETED
    assert result.output == Invoice(customer="ACME", total=12.5)
    # Stored as the model's JSON, which a later process reads back.
    doc = await admin.load_scope(LocalFileStorage(tmp_path), "s", "multiAgent", result_swarm_id(result))
    assert doc.fields["run"]["output"] == {"customer": "ACME", "total": 12.5}


def result_swarm_id(result):
    return "swarm"


async def test_such_a_swarm_as_a_graph_node_with_a_session(tmp_path):
    graph = (
        GraphBuilder()
        .add_node(swarm(), "team")
        .add_node(Agent(name="file", model=ScriptedModel(["filed"], follow_history=True)), "file")
        .add_edge("team", "file")
        .set_session_manager(SnapshotSessionManager("g", storage=LocalFileStorage(tmp_path)))
        .build()
    )
    result = await graph.invoke_async("read it")
    assert result.status == Status.COMPLETED, result.reason
    assert result.results["team"].output == Invoice(customer="ACME", total=12.5)


def mail_graph(session, file_replies=("filed",)):
    return (
        GraphBuilder()
        .add_node(
            extracting("extract", Mail, {"from": "ann@example.com", "to": "bob@example.com"}), "extract"
        )
        .add_node(Agent(name="file", model=ScriptedModel(list(file_replies), follow_history=True)), "file")
        .add_edge("extract", "file")
        .set_session_manager(session)
        .build()
    )


async def test_an_aliased_field_survives_a_resume(tmp_path):
    storage = LocalFileStorage(tmp_path)
    first = await mail_graph(SnapshotSessionManager("m", storage=storage), file_replies=()).invoke_async("go")
    assert first.status == Status.FAILED  # the second node has no reply: the run stops after extract
    resumed = await mail_graph(SnapshotSessionManager("m", storage=storage)).invoke_async(
        "go", resume_unfinished=True
    )
    assert resumed.status == Status.COMPLETED
    assert resumed.results["extract"].output == Mail.model_validate(
        {"from": "ann@example.com", "to": "bob@example.com"}
    )
    # The next node read the output in its wire form, with the alias (what the schema told the model).
    assert '"from":"ann@example.com"' in resumed.results["extract"].text.replace(" ", "")


async def test_every_usual_pydantic_type_round_trips_through_a_session(tmp_path):
    storage = LocalFileStorage(tmp_path)

    def graph(replies=("filed",)):
        return (
            GraphBuilder()
            .add_node(extracting("extract", Rich, RICH_INPUT), "extract")
            .add_node(Agent(name="file", model=ScriptedModel(list(replies), follow_history=True)), "file")
            .add_edge("extract", "file")
            .set_session_manager(SnapshotSessionManager("r", storage=storage))
            .build()
        )

    assert (await graph(()).invoke_async("go")).status == Status.FAILED
    resumed = await graph().invoke_async("go", resume_unfinished=True)
    assert resumed.status == Status.COMPLETED
    assert resumed.results["extract"].output == Rich.model_validate(RICH_INPUT)


def test_a_non_object_output_type_is_wrapped_so_providers_get_an_object_schema():
    Tags = RootModel[list[str]]
    name = OutputTool(Tags).name
    model = ScriptedModel([ToolCall(name, {"value": ["a", "b"]})])
    agent = Agent(model=model, output_type=Tags)
    result = agent("tags?")
    assert result.output == Tags(["a", "b"])
    (spec,) = [s for s in model.requests[0].tool_specs if s["name"] == name]
    assert spec["inputSchema"]["json"]["type"] == "object"
    assert spec["inputSchema"]["json"]["required"] == ["value"]


def test_a_scalar_output_type_is_wrapped_too():
    Count = RootModel[int]
    agent = Agent(model=ScriptedModel([ToolCall(OutputTool(Count).name, {"value": 3})]), output_type=Count)
    assert agent("how many?").output == Count(3)
