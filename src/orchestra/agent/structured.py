"""Structured output: the model ends its turn by calling a final tool whose input schema is the output type's.

A tool is the one mechanism every provider shares (Bedrock, OpenAI-compatible servers and the test models
alike), so no provider's "JSON mode" is needed. The model sees the output tool beside the agent's own
tools. When it calls it, the input is validated with the pydantic model: valid input ends the turn (the
closing assistant message is the output as JSON); invalid input goes back as an error tool result naming
the fields, and the model tries again. When the model ends its turn without calling it, the agent asks
for it once more and, where the model supports ``tool_choice``, forces it. Past ``max_retries`` failed
attempts the invocation raises ``StructuredOutputError`` (and its turn is rolled back like any failure).

A tool's input is an object for every provider, so an output type whose schema is not one (a
``RootModel[list[str]]``, a ``RootModel[int]``) is wrapped, before anything runs: the tool takes
``{"value": <the type's schema>}`` and the value under ``value`` is validated.

The loop knows an invocation's output only as an ``InvocationOutput``: ``OutputTool`` for a structured
one, ``TEXT_OUTPUT`` (which asks for nothing) otherwise.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import pydantic
from pydantic import BaseModel, ValidationError

from orchestra._imports import import_object
from orchestra._pydantic import validation_problems
from orchestra.errors import ConfigurationError, StructuredOutputError
from orchestra.messages import MessageDict
from orchestra.models import Model, ToolSpec
from orchestra.tools import AgentTool, ToolContext, ToolResultDict, tool_result

__all__ = [
    "TEXT_OUTPUT",
    "InvocationOutput",
    "OutputTool",
    "TextOutput",
    "model_from_schema",
    "resolve_output_type",
    "supports_tool_choice",
]

DEFAULT_MAX_RETRIES = 3
_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def resolve_output_type(value: Any) -> type[BaseModel]:
    """An output type: a pydantic model class, or ``"package.module:Class"`` naming one."""
    if isinstance(value, str):
        value = import_object(value)
    if not (isinstance(value, type) and issubclass(value, BaseModel)):
        raise ConfigurationError(
            f"output_type must be a pydantic BaseModel subclass (or 'module:Class' naming one), not {value!r}"
        )
    return value


class InvocationOutput(Protocol):
    """What an invocation's output asks of the agent loop (see the module docstring)."""

    @property
    def value(self) -> BaseModel | None:
        """The validated output once given (``result.output``)."""
        ...

    def tool(self, name: str) -> AgentTool | None:
        """A tool of the output's own that the model called by ``name``, if it is one."""
        ...

    def request(self, specs: list[ToolSpec], model: Model) -> tuple[list[ToolSpec], dict[str, Any]]:
        """The tool specs of a model request with the output's own, and the request's extra options."""
        ...

    def unfinished(self, agent_name: str) -> MessageDict | None:
        """The model ended its turn: None to let it end, or the prompt that asks it to go on."""
        ...

    def after_tools(self, agent_name: str) -> None:
        """A round of tool calls finished (raises when the output's attempts are spent)."""
        ...


class TextOutput:
    """No structured output: the model's last text is the result; nothing is asked of the loop."""

    value = None

    def tool(self, name: str) -> AgentTool | None:
        return None

    def request(self, specs: list[ToolSpec], model: Model) -> tuple[list[ToolSpec], dict[str, Any]]:
        return specs, {}

    def unfinished(self, agent_name: str) -> MessageDict | None:
        return None

    def after_tools(self, agent_name: str) -> None:
        return None


TEXT_OUTPUT = TextOutput()


class OutputTool:
    """The final tool of a structured-output invocation (see the module docstring)."""

    def __init__(self, output_type: type[BaseModel], max_retries: int = DEFAULT_MAX_RETRIES) -> None:
        self.output_type = output_type
        self.max_retries = max_retries
        self.name = _NAME.sub("_", output_type.__name__)[:64]
        schema = output_type.model_json_schema()
        description = schema.pop("description", None) or f"A {output_type.__name__}."
        self.wrapped = schema.get("type") != "object"
        if self.wrapped:
            schema = _wrapped(schema)
        self.spec: ToolSpec = {
            "name": self.name,
            "description": f"Give your final answer with this tool (and only then): {description}",
            "inputSchema": {"json": schema},
        }
        self.value: BaseModel | None = None
        self.failures = 0
        self.last_problem = "the model never called it"
        self.forced = False  # asked for by name (tool_choice), once the model ended a turn without it

    def tool(self, name: str) -> AgentTool | None:
        return self if name == self.name else None

    def request(self, specs: list[ToolSpec], model: Model) -> tuple[list[ToolSpec], dict[str, Any]]:
        options = {"tool_choice": self.name} if self.forced and supports_tool_choice(model) else {}
        return [*specs, self.spec], options

    def unfinished(self, agent_name: str) -> MessageDict | None:
        """The model ended its turn without the tool: ask for it, forced where the model takes
        ``tool_choice`` (raises ``StructuredOutputError`` once the attempts are spent)."""
        reminder = self.missed()
        self.check(agent_name)
        self.forced = True
        return {"role": "user", "content": [{"text": reminder}]}

    def after_tools(self, agent_name: str) -> None:
        if self.value is None:
            self.check(agent_name)  # invalid input past the retries

    async def invoke(self, tool_use: dict[str, Any], context: ToolContext) -> ToolResultDict:
        tool_use_id = tool_use["toolUseId"]
        given = tool_use.get("input") or {}
        try:
            if self.wrapped and not (isinstance(given, dict) and "value" in given):
                raise _MissingValue
            value = self.output_type.model_validate(given["value"] if self.wrapped else given)
        except (ValidationError, _MissingValue) as exc:
            self.failures += 1
            self.last_problem = (
                validation_problems(exc) if isinstance(exc, ValidationError) else "value: Field required"
            )
            return tool_result(
                tool_use_id,
                f"Error: invalid {self.name}: {self.last_problem}. Call {self.name} again with every field "
                "valid.",
                "error",
            )
        self.value = value
        context.end_turn(value.model_dump_json())
        return tool_result(tool_use_id, f"{self.name} accepted.")

    def missed(self) -> str:
        """The model ended its turn without the tool: count it, and the reminder to send it."""
        self.failures += 1
        self.last_problem = "the model ended its turn without calling it"
        return f"Give your final answer now by calling the {self.name} tool."

    def check(self, agent_name: str) -> None:
        """Raise ``StructuredOutputError`` once the attempts are spent."""
        if self.failures > self.max_retries:
            raise StructuredOutputError(
                f"agent {agent_name!r}: no valid {self.output_type.__name__} after {self.failures} attempts "
                f"(the last: {self.last_problem}); raise max_output_retries or make the fields easier to fill"
            )


class _MissingValue(Exception):
    """A wrapped output tool was called without its ``value``."""


def _wrapped(schema: dict[str, Any]) -> dict[str, Any]:
    """A non-object schema as the object ``{"value": schema}`` (its ``$defs`` kept at the top, where the
    references inside point)."""
    inner = dict(schema)
    defs = inner.pop("$defs", None)
    inner.pop("title", None)
    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {"value": inner},
        "required": ["value"],
        "additionalProperties": False,
    }
    if defs:
        wrapped["$defs"] = defs
    return wrapped


@functools.cache
def _accepts_tool_choice(model_type: type) -> bool:
    stream = getattr(model_type, "stream", None)
    if stream is None:
        return False
    try:
        parameters = inspect.signature(stream).parameters
    except (TypeError, ValueError):
        return False
    return "tool_choice" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def supports_tool_choice(model: Model) -> bool:
    """Whether ``model.stream`` takes ``tool_choice`` (the built-in models do; a custom one may not)."""
    return _accepts_tool_choice(type(model))


# -- JSON Schema -> pydantic model (YAML's inline output_schema) --------------------------------------------

_SCALARS: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
}


def model_from_schema(schema: Mapping[str, Any], name: str = "Output") -> type[BaseModel]:
    """A pydantic model for a JSON Schema object (properties, required, nested objects, arrays, enums).

    Raises:
        ConfigurationError: the schema uses something this subset does not cover (the message names it).
    """
    if schema.get("type", "object") != "object" or not isinstance(schema.get("properties"), Mapping):
        raise ConfigurationError(f"output_schema {name}: must be an object schema with 'properties'")
    required = set(schema.get("required", ()))
    fields: dict[str, Any] = {}
    for field_name, field_schema in schema["properties"].items():
        where = f"{name}.{field_name}"
        annotation = _annotation(field_schema, where)
        default = ... if field_name in required else field_schema.get("default")
        if field_name not in required and "default" not in field_schema:
            annotation = annotation | None
        fields[field_name] = (
            annotation,
            pydantic.Field(default, description=field_schema.get("description")),
        )
    model: type[BaseModel] = pydantic.create_model(_NAME.sub("_", name), **fields)
    if schema.get("description"):
        model.__doc__ = schema["description"]
    return model


def _annotation(schema: Any, where: str) -> Any:
    if not isinstance(schema, Mapping):
        raise ConfigurationError(f"output_schema {where}: a property's schema is a mapping, not {schema!r}")
    if "enum" in schema:
        values = tuple(schema["enum"])
        if not values:
            raise ConfigurationError(f"output_schema {where}: enum is empty")
        return Literal[values]
    kind = schema.get("type")
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        return list[_annotation(schema.get("items", {"type": "string"}), f"{where}[]")]  # type: ignore[misc]
    if kind == "object":
        if "properties" in schema:
            return model_from_schema(schema, where.replace(".", "_"))
        return dict[str, Any]
    supported = ", ".join([*_SCALARS, "array", "object", "enum"])
    raise ConfigurationError(
        f"output_schema {where}: type {json.dumps(kind)} is not supported here (use one of {supported}, "
        "or output_type: module:Class for anything richer)"
    )
