"""Messages and content blocks.

An agent keeps its conversation in the plain form of the docs, a list of dicts::

    {"role": "user", "content": [{"text": "Hello"}]}
    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "add", "input": {"a": 1}}}]}
    {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "status": "success",
                                                 "content": [{"text": "2"}]}}]}

The pydantic models here define and validate that form. Messages are validated once, when they enter
(``validate_message``), and kept as plain dicts afterwards, so reading ``agent.messages`` or sending the
history to a model never copies or converts the whole conversation. Binary content (images, documents) is
``bytes`` in Python and base64 in JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

__all__ = [
    "ContentBlock",
    "DocumentContent",
    "ImageContent",
    "Message",
    "MessageDict",
    "Role",
    "ToolResult",
    "ToolResultContent",
    "ToolResultDict",
    "ToolUse",
    "Usage",
    "messages_from_json",
    "messages_to_json",
    "text_of",
    "tool_uses_of",
    "user_message",
    "validate_message",
    "validate_messages",
]

Role = Literal["user", "assistant"]
MessageDict = dict[str, Any]
"""A message in its plain form: ``{"role": ..., "content": [...]}``."""
ToolResultDict = dict[str, Any]
"""A tool result block in its plain form: ``{"toolUseId": ..., "status": "success" | "error", "content":
[{"text": ...} | {"json": ...}]}``."""


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        ser_json_bytes="base64",
        val_json_bytes="base64",
    )


class BytesSource(_Model):
    bytes: bytes


class ImageContent(_Model):
    format: Literal["png", "jpeg", "gif", "webp"]
    source: BytesSource


class DocumentContent(_Model):
    format: Literal["pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md"]
    name: str
    source: BytesSource


def _exactly_one(values: Any, kinds: tuple[str, ...], what: str) -> Any:
    if isinstance(values, Mapping):
        present = [k for k in kinds if values.get(k) is not None]
        if len(present) != 1:
            raise ValueError(f"a {what} holds exactly one of {', '.join(kinds)}; got {sorted(values)}")
    return values


class ToolResultContent(_Model):
    """One part of a tool's result: text, JSON, an image or a document."""

    text: str | None = None
    json_: Any = Field(default=None, alias="json")
    image: ImageContent | None = None
    document: DocumentContent | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, values: Any) -> Any:
        return _exactly_one(values, ("text", "json", "image", "document"), "tool result content block")


class ToolUse(_Model):
    """A model's request to call a tool."""

    tool_use_id: str = Field(alias="toolUseId")
    name: str
    input: Any = Field(default_factory=dict)


class ToolResult(_Model):
    """What a tool call returned, sent back to the model."""

    tool_use_id: str = Field(alias="toolUseId")
    status: Literal["success", "error"]
    content: list[ToolResultContent]


class ContentBlock(_Model):
    """One block of a message: exactly one of text, toolUse, toolResult, image or document."""

    text: str | None = None
    tool_use: ToolUse | None = Field(default=None, alias="toolUse")
    tool_result: ToolResult | None = Field(default=None, alias="toolResult")
    image: ImageContent | None = None
    document: DocumentContent | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, values: Any) -> Any:
        return _exactly_one(values, ("text", "toolUse", "toolResult", "image", "document"), "content block")


class Message(_Model):
    """A conversation message."""

    role: Role
    content: list[ContentBlock]


class Usage(_Model):
    """Token usage of one or more model calls (a value: frozen, so one may be shared)."""

    model_config = ConfigDict(**_Model.model_config, frozen=True)

    input_tokens: int = Field(default=0, alias="inputTokens")
    output_tokens: int = Field(default=0, alias="outputTokens")
    total_tokens: int = Field(default=0, alias="totalTokens")

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


_MESSAGE = TypeAdapter(Message)
_MESSAGES = TypeAdapter(list[Message])


def _plain(message: Message) -> MessageDict:
    return message.model_dump(by_alias=True, exclude_none=True)


def validate_message(message: Mapping[str, Any] | Message) -> MessageDict:
    """Validate one message and return its plain form.

    Raises:
        ValueError: the message is not valid; the message says which field is wrong.
    """
    if isinstance(message, Message):
        return _plain(message)
    try:
        return _plain(_MESSAGE.validate_python(message))
    except ValidationError as exc:
        raise ValueError(f"invalid message: {_describe(exc)}") from None


def validate_messages(messages: Iterable[Mapping[str, Any] | Message]) -> list[MessageDict]:
    """Validate a list of messages and return their plain forms (new dicts, the input is not kept)."""
    out: list[MessageDict] = []
    for index, message in enumerate(messages):
        try:
            out.append(validate_message(message))
        except ValueError as exc:
            raise ValueError(f"messages[{index}]: {exc}") from None
    return out


def messages_to_json(messages: Iterable[MessageDict]) -> bytes:
    """Serialize plain messages to JSON (binary content as base64)."""
    return _MESSAGES.dump_json(
        [Message.model_validate(m) for m in messages], by_alias=True, exclude_none=True
    )


def messages_from_json(data: bytes | str) -> list[MessageDict]:
    """Parse messages written by :func:`messages_to_json` back to their plain form."""
    return [_plain(m) for m in _MESSAGES.validate_json(data)]


def text_of(message: Mapping[str, Any] | None) -> str:
    """The text blocks of a message, joined by newlines (tool calls and binary content are left out)."""
    if not message:
        return ""
    return "\n".join(block["text"] for block in message.get("content", []) if "text" in block)


def tool_uses_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The toolUse payloads of a message, in order."""
    return [block["toolUse"] for block in message.get("content", []) if "toolUse" in block]


def user_message(text: str) -> MessageDict:
    """A user message holding one text block."""
    return {"role": "user", "content": [{"text": text}]}


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "message"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)
