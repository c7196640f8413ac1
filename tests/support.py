"""Helpers that tests (and YAML fixtures) reach by import path, e.g. ``tests.support:reply_fn``."""

from __future__ import annotations

from typing import Any


def reply_fn(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    return "from a function"


def spec_source(node_input: Any) -> str:
    return "APPROVED v2"


def spec_mark(node_input: Any) -> str:
    return f"ran {node_input.node_id}"


def spec_condition(state: Any, invocation_state: dict[str, Any]) -> bool:
    return bool(invocation_state.get("allow")) and state.text("source").startswith("APPROVED")
