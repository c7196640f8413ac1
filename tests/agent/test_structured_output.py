"""Structured output: a forced final tool, validated by pydantic, retried, on every model kind."""

import pytest
from pydantic import BaseModel, Field

from orchestra import Agent, tool
from orchestra.agent.structured import model_from_schema
from orchestra.errors import ConfigurationError, StructuredOutputError
from orchestra.models import FunctionModel, ScriptedModel
from orchestra.models.scripted import ToolCall


class Invoice(BaseModel):
    """An invoice read from a document."""

    customer: str
    total: float = Field(description="the amount due")
    lines: list[str] = []


GOOD = {"customer": "ACME", "total": 120.5, "lines": ["bolts"]}


@tool
def lookup(name: str) -> str:
    """Look a customer up.

    Args:
        name: the customer
    """
    return f"{name} is a good customer"


def test_the_output_tool_returns_a_validated_instance_and_the_text_stays():
    model = ScriptedModel([ToolCall("Invoice", GOOD)])
    agent = Agent(model=model)
    result = agent("read the invoice", output_type=Invoice)
    assert result.output == Invoice(**GOOD)
    assert isinstance(result.output, Invoice)
    assert str(result) == Invoice(**GOOD).model_dump_json()
    spec = model.requests[0].tool_specs[-1]
    assert spec["name"] == "Invoice"
    assert spec["inputSchema"]["json"]["required"] == ["customer", "total"]
    assert model.requests[0].tool_choice is None  # not forced while the model may still use other tools
    # The history stays whole: tool use, its result, and a closing assistant message.
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "user", "assistant"]
    assert agent.messages[2]["content"][0]["toolResult"]["status"] == "success"


def test_other_tools_run_first_and_the_agent_default_applies():
    model = ScriptedModel([ToolCall("lookup", {"name": "ACME"}), ToolCall("Invoice", GOOD)])
    agent = Agent(model=model, tools=[lookup], output_type=Invoice)
    result = agent("read it")
    assert result.output.customer == "ACME"
    assert [s["name"] for s in model.requests[1].tool_specs] == ["lookup", "Invoice"]


def test_invalid_input_goes_back_as_a_tool_error_naming_the_fields_then_succeeds():
    model = ScriptedModel(
        [ToolCall("Invoice", {"customer": "ACME", "total": "lots"}), ToolCall("Invoice", GOOD)]
    )
    result = Agent(model=model)("read", output_type=Invoice)
    assert result.output.total == 120.5
    error = model.requests[1].messages[-1]["content"][0]["toolResult"]
    assert error["status"] == "error"
    assert "total" in error["content"][0]["text"]


def test_a_text_answer_is_followed_by_a_forced_call():
    model = ScriptedModel(["It is ACME, 120.50.", ToolCall("Invoice", GOOD)])
    agent = Agent(model=model)
    result = agent("read", output_type=Invoice)
    assert result.output == Invoice(**GOOD)
    assert model.requests[1].tool_choice == "Invoice"
    assert "Invoice" in model.requests[1].last_text  # the reminder
    assert [m["role"] for m in agent.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_past_the_retries_it_raises_naming_the_field_and_rolls_the_turn_back():
    bad = ToolCall("Invoice", {"customer": "ACME"})
    model = ScriptedModel([bad, bad, bad])
    agent = Agent(model=model, max_output_retries=2, messages=[])
    with pytest.raises(StructuredOutputError, match=r"no valid Invoice after 3 attempts.*total"):
        agent("read", output_type=Invoice)
    assert agent.messages == []  # the failed turn left nothing


def test_a_model_without_tool_choice_is_asked_in_words():
    calls = []

    def reply(messages, specs):
        calls.append([s["name"] for s in specs])
        return "plain text" if len(calls) == 1 else ToolCall("Invoice", GOOD)

    class NoChoice:  # a custom model whose stream() has no tool_choice keyword
        name = "custom"

        def __init__(self):
            self.inner = FunctionModel(reply)

        def stream(self, messages, *, tool_specs=(), system_prompt=None):
            return self.inner.stream(messages, tool_specs=tool_specs, system_prompt=system_prompt)

    result = Agent(model=NoChoice())("read", output_type=Invoice)
    assert result.output.customer == "ACME"
    assert calls == [["Invoice"], ["Invoice"]]


def test_a_tool_with_the_output_tool_name_is_refused():
    @tool
    def Invoice(customer: str) -> str:
        """Clash.

        Args:
            customer: who
        """
        return customer

    with pytest.raises(ConfigurationError, match="tool named 'Invoice'"):
        Agent(model=ScriptedModel([]), tools=[Invoice])("x", output_type=globals()["Invoice"])


def test_output_type_must_be_a_pydantic_model():
    with pytest.raises(ConfigurationError, match="BaseModel subclass"):
        Agent(model="scripted", output_type=dict)
    assert (
        Agent(model="scripted", output_type="tests.agent.test_structured_output:Invoice").output_type
        is Invoice
    )


def test_a_json_schema_becomes_a_model():
    model = model_from_schema(
        {
            "type": "object",
            "description": "A triage verdict.",
            "properties": {
                "severity": {"enum": ["low", "high"]},
                "score": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "owner": {"type": "object", "properties": {"team": {"type": "string"}}, "required": ["team"]},
            },
            "required": ["severity", "score"],
        },
        "Triage",
    )
    value = model.model_validate({"severity": "high", "score": 0.9, "owner": {"team": "infra"}})
    assert value.severity == "high"
    assert value.tags is None
    assert value.owner.team == "infra"
    with pytest.raises(ValueError, match="severity"):
        model.model_validate({"severity": "urgent", "score": 1})
    with pytest.raises(ConfigurationError, match=r"Triage.when: type \"date\" is not supported"):
        model_from_schema({"properties": {"when": {"type": "date"}}}, "Triage")
