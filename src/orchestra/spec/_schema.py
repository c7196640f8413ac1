"""The spec's JSON Schema, and writing a spec back to YAML."""

from __future__ import annotations

import json
from typing import Any

import yaml

from orchestra.spec.models import PipelineSpec

__all__ = ["dump_yaml", "json_schema"]


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
