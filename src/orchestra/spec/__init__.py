"""Pipelines from YAML: spec version 1 as pydantic models, a safe loader with positioned errors, and the
JSON Schema (``orchestra schema``)."""

from orchestra.errors import OrchestraSpecError
from orchestra.spec._schema import dump_yaml, json_schema
from orchestra.spec.loader import LoadedSpec, build, load, parse_file, parse_text
from orchestra.spec.models import (
    AgentSpec,
    ConditionSpec,
    ConversationManagerSpec,
    EdgeSpec,
    LimitsSpec,
    ModelSpec,
    NodeSpec,
    PipelineSpec,
    SessionSpec,
)

__all__ = [
    "AgentSpec",
    "ConditionSpec",
    "ConversationManagerSpec",
    "EdgeSpec",
    "LimitsSpec",
    "LoadedSpec",
    "ModelSpec",
    "NodeSpec",
    "OrchestraSpecError",
    "PipelineSpec",
    "SessionSpec",
    "build",
    "dump_yaml",
    "json_schema",
    "load",
    "parse_file",
    "parse_text",
]
