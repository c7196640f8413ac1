"""Pipelines from YAML: spec version 1 as pydantic models, a safe loader with positioned errors, and the
JSON Schema (``orchestra schema``); ``load_document`` reads any YAML file with the same errors."""

from orchestra.errors import OrchestraSpecError
from orchestra.spec._schema import dump_yaml, json_schema
from orchestra.spec._yaml import Located
from orchestra.spec.documents import load_document
from orchestra.spec.loader import LoadedSpec, build, load, parse_file, parse_text
from orchestra.spec.models import (
    AgentSpec,
    BudgetSpec,
    ConditionSpec,
    ConversationManagerSpec,
    EdgeSpec,
    LimitsSpec,
    MapJoinSpec,
    MapSpec,
    ModelSpec,
    NodeSpec,
    PipelineSpec,
    PriceSpec,
    RetryPolicySpec,
    SessionSpec,
)

__all__ = [
    "AgentSpec",
    "BudgetSpec",
    "ConditionSpec",
    "ConversationManagerSpec",
    "EdgeSpec",
    "LimitsSpec",
    "LoadedSpec",
    "Located",
    "MapJoinSpec",
    "MapSpec",
    "ModelSpec",
    "NodeSpec",
    "OrchestraSpecError",
    "PipelineSpec",
    "PriceSpec",
    "RetryPolicySpec",
    "SessionSpec",
    "build",
    "dump_yaml",
    "json_schema",
    "load",
    "load_document",
    "parse_file",
    "parse_text",
]
