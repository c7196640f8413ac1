"""What Amazon Bedrock and OpenAI accept, checked with their own definitions (not with our servers).

- ``bedrock_problems``: botocore's parameter validation on the ``bedrock-runtime`` service model
  (``ConverseStream``'s input shape), plus the shape's patterns and maximum lengths (which botocore
  leaves to the service), plus the Converse conversation rules the service enforces.
- ``openai_problems``: the ``openai`` package's own request types (``CompletionCreateParamsStreaming``
  and the message TypedDicts, validated with pydantic), plus the Chat Completions conversation rules.

Each returns a list of problems; an empty list means the request would be accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any, get_type_hints

import botocore.session
from botocore.model import Shape
from botocore.validate import ParamValidator
from openai.types.chat import ChatCompletionMessageParam, completion_create_params
from pydantic import TypeAdapter, ValidationError

# -- Bedrock Converse ----------------------------------------------------------------------------------


@cache
def _converse_input() -> Shape:
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    return model.operation_model("ConverseStream").input_shape


def _shape_problems(shape: Shape, value: Any, path: str) -> Iterator[str]:
    """Patterns and maximum lengths of the service model, which botocore's validator does not check."""
    metadata = shape.metadata
    if shape.type_name == "structure" and isinstance(value, dict):
        for key, item in value.items():
            if key in shape.members:  # type: ignore[attr-defined]
                yield from _shape_problems(shape.members[key], item, f"{path}.{key}")  # type: ignore[attr-defined]
    elif shape.type_name == "list" and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _shape_problems(shape.member, item, f"{path}[{index}]")  # type: ignore[attr-defined]
    elif shape.type_name == "string" and isinstance(value, str):
        pattern = metadata.get("pattern")
        if pattern and not re.fullmatch(pattern, value):
            yield f"{path}: {value!r} does not match {pattern}"
        if "max" in metadata and len(value) > metadata["max"]:
            yield f"{path}: longer than {metadata['max']}"


def _converse_content_problems(request: dict[str, Any]) -> Iterator[str]:
    messages = request.get("messages", [])
    if not messages:
        yield "messages: empty"
        return
    if messages[0]["role"] != "user":
        yield "messages[0]: a conversation must start with a user message"
    if messages[-1]["role"] != "user":
        yield "the last message must be a user message"
    uses_tools = False
    for i, message in enumerate(messages):
        content = message["content"]
        if not content:
            yield f"messages[{i}]: content is empty"
        if i and message["role"] == messages[i - 1]["role"]:
            yield f"messages[{i}]: roles must alternate between user and assistant"
        for j, block in enumerate(content):
            if "text" in block and not block["text"].strip():
                yield f"messages[{i}].content[{j}]: the text field is blank"
            for part in block.get("toolResult", {}).get("content", []):
                if "text" in part and not part["text"].strip():
                    yield f"messages[{i}].content[{j}].toolResult: the text field is blank"
        uses = [b["toolUse"]["toolUseId"] for b in content if "toolUse" in b]
        results = [b["toolResult"]["toolUseId"] for b in content if "toolResult" in b]
        uses_tools = uses_tools or bool(uses or results)
        if message["role"] == "user":
            asked = (
                [b["toolUse"]["toolUseId"] for b in messages[i - 1]["content"] if "toolUse" in b] if i else []
            )
            if sorted(results) != sorted(asked):
                yield (
                    f"messages[{i}]: the number of toolResult blocks must match the toolUse blocks of the "
                    f"previous turn ({sorted(results)} vs {sorted(asked)})"
                )
        elif results:
            yield f"messages[{i}]: an assistant message holds toolResult blocks"
    if uses_tools and not request.get("toolConfig"):
        yield "toolConfig must be defined when the messages hold toolUse or toolResult blocks"


def bedrock_problems(request: dict[str, Any]) -> list[str]:
    """Why Bedrock's ConverseStream would refuse ``request`` (kwargs of ``converse_stream``)."""
    report = ParamValidator().validate(request, _converse_input())
    problems = [report.generate_report()] if report.has_errors() else []
    problems += _shape_problems(_converse_input(), request, "request")
    problems += _converse_content_problems(request)
    return problems


# -- OpenAI Chat Completions -----------------------------------------------------------------------------

_BODY = TypeAdapter(completion_create_params.CompletionCreateParamsStreaming)
_MESSAGE = TypeAdapter(ChatCompletionMessageParam)
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _drain(value: Any) -> Any:
    """Consume the lazily validated iterables pydantic returns for ``Iterable[...]`` fields."""
    if isinstance(value, dict):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_drain(v) for v in value]
    if hasattr(value, "__next__"):
        return [_drain(v) for v in value]
    return value


@cache
def _message_keys(role: str) -> set[str]:
    from openai.types import chat

    typed = {
        "system": chat.ChatCompletionSystemMessageParam,
        "developer": chat.ChatCompletionDeveloperMessageParam,
        "user": chat.ChatCompletionUserMessageParam,
        "assistant": chat.ChatCompletionAssistantMessageParam,
        "tool": chat.ChatCompletionToolMessageParam,
    }[role]
    return set(get_type_hints(typed))


def _chat_content_problems(messages: list[dict[str, Any]]) -> Iterator[str]:
    open_calls: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer", "user", "assistant", "tool"):
            extra = set(message) - _message_keys(role)
            if extra:
                yield f"messages[{i}]: unknown fields {sorted(extra)} for a {role} message"
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                yield f"messages[{i}]: a tool message must answer a tool call of the preceding assistant message"
            open_calls.discard(message.get("tool_call_id"))
            continue
        if open_calls:
            yield f"messages[{i}]: tool calls {sorted(open_calls)} have no tool message"
            open_calls = set()
        content = message.get("content")
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls and not content:
                yield f"messages[{i}]: an assistant message needs content or tool_calls"
            open_calls = {call["id"] for call in calls}
        elif role == "user" and (content is None or content == "" or content == []):
            yield f"messages[{i}]: a user message needs content"
    if open_calls:
        yield f"tool calls {sorted(open_calls)} have no tool message"
    if messages and messages[-1].get("role") not in ("user", "tool"):
        yield "the last message must come from the user or a tool"


def openai_problems(body: dict[str, Any]) -> list[str]:
    """Why the Chat Completions API would refuse ``body`` (a streaming request)."""
    problems = []
    try:
        _drain(_BODY.validate_python(body))
        for message in body["messages"]:
            _drain(_MESSAGE.validate_python(message))
    except ValidationError as exc:
        problems.append(str(exc))
    problems += _chat_content_problems(body.get("messages", []))
    for tool in body.get("tools", []):
        if not _TOOL_NAME.fullmatch(tool["function"]["name"]):
            problems.append(f"tools: invalid function name {tool['function']['name']!r}")
    return problems
