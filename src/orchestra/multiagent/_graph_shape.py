"""A graph's structure as its scheduler reads it: ``Edge``, ``GraphShape`` (each node's out-edges and
forward predecessors), and ``GraphState``, what edge conditions see of a run."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestra.agent.state import JSONState
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent.results import NodeResult

__all__ = ["Condition", "ConditionError", "Edge", "GraphShape", "GraphState", "takes_invocation_state"]

Condition = Callable[..., bool]


class ConditionError(Exception):
    """An edge condition raised; the run fails with this message."""


def takes_invocation_state(fn: Callable[..., Any]) -> bool:
    """Whether a condition is called with ``invocation_state=`` (it names it, or takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "invocation_state" or p.kind is p.VAR_KEYWORD for p in parameters)


@dataclass(frozen=True)
class Edge:
    """A directed edge; ``condition(state)`` (or ``condition(state, invocation_state=...)``) decides if it fires."""

    src: str
    dst: str
    condition: Condition | None = None
    back: bool = False
    _takes_invocation_state: bool = field(default=False, compare=False, repr=False)

    def fires(self, state: GraphState, invocation_state: dict[str, Any]) -> bool:
        if self.condition is None:
            return True
        if self._takes_invocation_state:
            return bool(self.condition(state, invocation_state=invocation_state))
        return bool(self.condition(state))


@dataclass(frozen=True)
class GraphShape:
    """A graph's structure as its scheduler reads it: entry points, edges, each node's out-edges and its
    predecessors along forward edges, and its position (ready nodes queue in declaration order)."""

    entry_points: tuple[str, ...]
    edges: tuple[Edge, ...]
    out: Mapping[str, list[Edge]]
    forward_preds: Mapping[str, list[str]]
    order: Mapping[str, int]

    @classmethod
    def of(cls, node_ids: Sequence[str], edges: Sequence[Edge], entry_points: Sequence[str]) -> GraphShape:
        out: dict[str, list[Edge]] = {n: [] for n in node_ids}
        forward_preds: dict[str, list[str]] = {n: [] for n in node_ids}
        for edge in edges:
            out[edge.src].append(edge)
            if not edge.back:
                forward_preds[edge.dst].append(edge.src)
        order = {node_id: index for index, node_id in enumerate(node_ids)}
        return cls(tuple(entry_points), tuple(edges), out, forward_preds, order)


class GraphState:
    """What edge conditions see: the task, node results, the shared state and the run's counters."""

    def __init__(self, document: RunDocument) -> None:
        self._document = document

    @property
    def task(self) -> Any:
        return self._document.field("task")

    @property
    def state(self) -> JSONState:
        """The graph's shared state (read and write)."""
        return self._document.state

    @property
    def results(self) -> dict[str, NodeResult]:
        """The latest result of every node that ran."""
        return self._document.results()

    @property
    def execution_order(self) -> list[str]:
        return list(self._document.log("execution_order"))

    @property
    def execution_count(self) -> int:
        return int(self._document.run["execution_count"])

    def output(self, node_id: str) -> Any:
        """The latest output of ``node_id`` (None if it has not run)."""
        result = self._document.result(node_id)
        return None if result is None else result.output

    def text(self, node_id: str) -> str:
        """The latest output of ``node_id`` as text ("" if it has not run)."""
        result = self._document.result(node_id)
        return "" if result is None else result.text
