from typing import Literal

import pytest
from pydantic import BaseModel

from orchestra import Agent, ToolContext, tool
from orchestra.errors import ConfigurationError
from orchestra.testing import ScriptedModel, ToolCall
from orchestra.tools import FunctionTool, ToolRegistry


def test_bare_decorator_builds_schema_from_hints_and_docstring():
    @tool
    def search(query: str, limit: int = 5, mode: Literal["fast", "deep"] = "fast") -> list[str]:
        """Search the knowledge base.

        Longer explanation that is still part of the description.

        Args:
            query: What to look for,
                over two lines.
            limit (int): How many results.
            mode: How hard to look.

        Returns:
            The matches.
        """
        return [query] * limit

    assert isinstance(search, FunctionTool)
    spec = search.spec
    assert spec["name"] == "search"
    assert spec["description"].startswith("Search the knowledge base.")
    assert "Longer explanation" in spec["description"]
    assert "Returns" not in spec["description"]
    schema = spec["inputSchema"]["json"]
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"] == {
        "description": "What to look for, over two lines.",
        "type": "string",
    }
    assert schema["properties"]["limit"]["default"] == 5
    assert schema["properties"]["limit"]["description"] == "How many results."
    assert schema["properties"]["mode"]["enum"] == ["fast", "deep"]
    assert search("x", limit=2) == ["x", "x"]  # still a plain function


def test_decorator_with_name_and_description():
    @tool(name="lookup", description="Find a thing.")
    def find(thing: str) -> str:
        return thing

    assert find.name == "lookup"
    assert find.spec["description"] == "Find a thing."


def test_pydantic_model_parameters_are_validated_and_converted():
    class Point(BaseModel):
        x: int
        y: int

    @tool
    def norm(point: Point) -> int:
        """Manhattan norm.

        Args:
            point: the point
        """
        return abs(point.x) + abs(point.y)

    agent = Agent(model=ScriptedModel([ToolCall("norm", {"point": {"x": -2, "y": "3"}}), "5"]), tools=[norm])
    agent("norm?")
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "5"}]


def test_context_true_without_tool_context_parameter_fails_at_decoration():
    with pytest.raises(ConfigurationError, match=r"'needs_context'.*context=True.*'tool_context'"):

        @tool(context=True)
        def needs_context(x: int) -> int:
            return x


def test_context_parameter_is_not_in_the_schema():
    @tool(context=True)
    def who(tool_context: ToolContext, greeting: str = "hi") -> str:
        """Greets."""
        return greeting

    assert set(who.spec["inputSchema"]["json"]["properties"]) == {"greeting"}


def test_extra_input_is_rejected_as_an_error_result():
    @tool
    def one(a: int) -> int:
        """One arg."""
        return a

    agent = Agent(model=ScriptedModel([ToolCall("one", {"a": 1, "zzz": 2}), "ok"]), tools=[one])
    agent("go")
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["status"] == "error"
    assert "zzz" in result["content"][0]["text"]


async def test_async_tools_and_return_value_forms():
    @tool
    async def as_dict() -> dict:
        """Returns JSON."""
        return {"k": [1, 2]}

    @tool
    def as_result() -> dict:
        """Returns a full tool result."""
        return {"status": "error", "content": [{"text": "custom"}]}

    @tool
    def as_none() -> None:
        """Returns nothing."""

    agent = Agent(
        model=ScriptedModel([[ToolCall("as_dict"), ToolCall("as_result"), ToolCall("as_none")], "ok"]),
        tools=[as_dict, as_result, as_none],
    )
    await agent.invoke_async("go")
    results = [b["toolResult"] for b in agent.messages[2]["content"]]
    assert results[0]["content"] == [{"json": {"k": [1, 2]}}]
    assert results[1]["status"] == "error"
    assert results[1]["content"] == [{"text": "custom"}]
    assert results[2]["content"] == [{"text": "(no output)"}]  # never a blank block


def test_plain_functions_are_wrapped_and_duplicate_names_refused():
    def shout(text: str) -> str:
        """Shout it."""
        return text.upper()

    registry = ToolRegistry([shout])
    assert registry.names == ["shout"]
    with pytest.raises(ConfigurationError, match="two tools are named 'shout'"):
        registry.add(tool(name="shout")(lambda text: text))
    with pytest.raises(ConfigurationError, match="is not a tool"):
        ToolRegistry([42])
