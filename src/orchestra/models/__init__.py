"""Models: the ``Model`` protocol, the deterministic ``ScriptedModel``/``FunctionModel``, and providers.

Providers for real services live in submodules imported on demand (``orchestra.models.openai``,
``orchestra.models.bedrock``); ``resolve_model`` turns a model string such as ``openai:gpt-4o`` into one.
"""

from orchestra.models._base import (
    Model,
    ModelEvent,
    ModelTelemetry,
    StopReason,
    StreamStop,
    TextDelta,
    ToolSpec,
    ToolUseEvent,
    UsageEvent,
    complete_text,
)
from orchestra.models._registry import MODEL_ENV_VAR, default_model, resolve_model, scripted_reply
from orchestra.models.scripted import FunctionModel, ModelRequest, Reply, ScriptedModel, ToolCall

__all__ = [
    "MODEL_ENV_VAR",
    "FunctionModel",
    "Model",
    "ModelEvent",
    "ModelRequest",
    "ModelTelemetry",
    "Reply",
    "ScriptedModel",
    "StopReason",
    "StreamStop",
    "TextDelta",
    "ToolCall",
    "ToolSpec",
    "ToolUseEvent",
    "UsageEvent",
    "complete_text",
    "default_model",
    "resolve_model",
    "scripted_reply",
]
