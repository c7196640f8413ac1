"""Pipelines from YAML: spec version 1 as pydantic models, a safe loader with positioned errors, and the
JSON Schema (``orchestra schema``)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from orchestra.errors import OrchestraSpecError
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


def dump_yaml(spec: PipelineSpec) -> str:
    """A spec as YAML (defaults left out)."""
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data = {"version": 1, **data}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of spec version 1 (models and conditions may also be written as strings)."""
    schema = PipelineSpec.model_json_schema(by_alias=True)
    if "$ref" in schema:  # the spec is recursive (nested graphs), so pydantic puts the root among $defs
        root = schema["$ref"].rsplit("/", 1)[-1]
        schema = {**schema["$defs"].pop(root), "$defs": schema["$defs"]}
        schema["$defs"][root] = {"$ref": "#"}
    text = json.dumps(schema)
    for name in ("ModelSpec", "ConditionSpec"):
        ref = json.dumps({"$ref": f"#/$defs/{name}"})
        text = text.replace(ref, json.dumps({"anyOf": [{"type": "string"}, {"$ref": f"#/$defs/{name}"}]}))
    result: dict[str, Any] = json.loads(text)
    result["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    result["title"] = "orchestra pipeline spec, version 1"
    return result
