"""Helpers that tests (and YAML fixtures) reach by import path, e.g. ``tests.support:reply_fn``."""

from __future__ import annotations

from typing import Any


def reply_fn(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    return "from a function"
