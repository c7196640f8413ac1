"""Built-in edge conditions, made from ``when:`` specs without running any code but named imports."""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from orchestra._imports import import_object
from orchestra.multiagent.graph import GraphState, takes_invocation_state
from orchestra.spec.models import ConditionSpec, FieldTest

__all__ = ["SpecCondition"]


class SpecCondition:
    """A condition built from a ``when:`` spec; keeps the spec so the graph can be written back to YAML."""

    def __init__(self, spec: ConditionSpec, source: str) -> None:
        self.spec = spec
        self.source = source
        self._test = self._build(spec)

    def __call__(self, state: GraphState, invocation_state: dict[str, Any] | None = None) -> bool:
        return self._test(state, invocation_state or {})

    def __repr__(self) -> str:
        return f"SpecCondition({self.spec.model_dump(by_alias=True, exclude_none=True)})"

    @property
    def condition_id(self) -> str:
        """The condition's spec as JSON: what the topology hash covers."""
        return "when:" + json.dumps(self.spec.model_dump(by_alias=True, exclude_none=True), sort_keys=True)

    def _build(self, spec: ConditionSpec) -> Callable[[GraphState, dict[str, Any]], bool]:
        source = self.source
        if spec.output_contains is not None:
            text = spec.output_contains
            return lambda state, _: text in state.text(source)
        if spec.output_matches is not None:
            pattern = re.compile(spec.output_matches)
            return lambda state, _: pattern.search(state.text(source)) is not None
        if spec.state_equals is not None:
            expected = spec.state_equals
            return lambda state, _: all(state.state.get(k) == v for k, v in expected.items())
        if spec.status is not None:
            wanted = spec.status

            def status_is(state: GraphState, _: dict[str, Any]) -> bool:
                results = state.results
                return all(
                    (results[n].status.value if n in results else "pending") == s for n, s in wanted.items()
                )

            return status_is
        if spec.all_ is not None:
            parts = [self._build(c) for c in spec.all_]
            return lambda state, inv: all(p(state, inv) for p in parts)
        if spec.any_ is not None:
            parts = [self._build(c) for c in spec.any_]
            return lambda state, inv: any(p(state, inv) for p in parts)
        if spec.not_ is not None:
            inner = self._build(spec.not_)
            return lambda state, inv: not inner(state, inv)
        if spec.field_test is not None:
            return _field_condition(spec.field_test, source)
        assert spec.call is not None
        fn = import_object(spec.call)
        if not callable(fn):
            raise TypeError(f"{spec.call} is not callable")
        if takes_invocation_state(fn):
            return lambda state, inv: bool(fn(state, invocation_state=inv))
        return lambda state, _: bool(fn(state))


_MISSING = object()


def field_of(output: Any, path: str) -> Any:
    """The value at a dotted ``path`` of a structured output (a pydantic model or a dict), or ``_MISSING``."""
    value = output
    for part in path.split("."):
        if isinstance(value, BaseModel):
            value = getattr(value, part, _MISSING) if part in type(value).model_fields else _MISSING
        elif isinstance(value, dict):
            value = value.get(part, _MISSING)
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
    "in_": lambda value, allowed: value in allowed,
}


def _field_condition(test: FieldTest, source: str) -> Callable[[GraphState, dict[str, Any]], bool]:
    node = test.of or source
    name = next(k for k in _COMPARISONS if getattr(test, k) is not None)
    compare, expected = _COMPARISONS[name], getattr(test, name)

    def holds(state: GraphState, _: dict[str, Any]) -> bool:
        value = field_of(state.output(node), test.field)
        if value is _MISSING:
            return False
        try:
            return bool(compare(value, expected))
        except TypeError:  # e.g. a string compared with a number: the condition does not hold
            return False

    return holds
