"""Statuses and results of Graph and Swarm runs (pydantic models: they are persisted and returned)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from orchestra.interrupts import Interrupt
from orchestra.messages import MessageDict, Usage

__all__ = [
    "GraphResult",
    "MultiAgentResult",
    "NodeResult",
    "Status",
    "SwarmResult",
    "output_json",
    "output_text",
]


class Status(StrEnum):
    """The status of a run or of one node."""

    PENDING = "pending"
    EXECUTING = "executing"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


def output_text(output: Any) -> str:
    """A node's output as text: strings as they are, anything else as JSON."""
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    if isinstance(output, BaseModel):  # a structured output, in the wire form its schema describes
        return output.model_dump_json(by_alias=True)
    return json.dumps(output, default=_jsonable)


def output_json(output: Any) -> Any:
    """An output as it is stored: a structured output (a pydantic model) as its JSON, aliases included
    (the form its schema describes, which validating it again accepts); so are the models in a list (a
    map's items) or a dict (a graph's terminals)."""
    if isinstance(output, BaseModel):
        return output.model_dump(mode="json", by_alias=True)
    if isinstance(output, list):
        return [output_json(item) for item in output]
    if isinstance(output, dict):
        return {key: output_json(value) for key, value in output.items()}
    return output


def _jsonable(value: Any) -> Any:
    return value.model_dump(mode="json", by_alias=True) if isinstance(value, BaseModel) else str(value)


class NodeResult(BaseModel):
    """What one execution of a node produced.

    Attributes:
        node_id: the node.
        status: COMPLETED, FAILED or INTERRUPTED.
        output: an agent's final text, a function's return value (JSON), a nested run's output.
        message: an agent node's final assistant message.
        error: why the node failed.
        usage: tokens used by the node (nested runs included).
        execution_time_ms: wall time of this execution.
        execution_count: which execution of the node this was (nodes in cycles run more than once).
        interrupts: what the node asks when it is INTERRUPTED.
        output_from: for a nested Graph or Swarm, which of its nodes gave the output (``{"node": id}``, with
            ``"from"`` when that node is nested too, or ``{"each": {terminal: ...}}`` for a graph's several
            terminals): how a resumed run gives a structured output back as its model.
    """

    model_config = ConfigDict(extra="ignore")

    node_id: str
    status: Status
    output: Any = None
    message: MessageDict | None = None
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    execution_time_ms: float = 0.0
    execution_count: int = 1
    interrupts: list[Interrupt] = Field(default_factory=list)
    output_from: dict[str, Any] | None = None

    @field_serializer("output", when_used="json")
    def _output_json(self, output: Any) -> Any:
        return output_json(output)

    @property
    def text(self) -> str:
        return output_text(self.output)

    def __str__(self) -> str:
        return self.text


class MultiAgentResult(BaseModel):
    """The outcome of a Graph or Swarm run.

    Attributes:
        status: COMPLETED, FAILED or INTERRUPTED.
        results: the latest result of every node that ran.
        execution_order: node ids in the order their executions finished.
        output: the run's final output (the last node's, or the terminal nodes' for a graph).
        reason: why the run stopped, when it did not complete (names the limit, the node or the error).
        error: the error of the failed node, if any.
        interrupts: the open questions of an INTERRUPTED run; answer with ``interrupt.to_response(...)``.
        usage: tokens used by every node of the run, accumulated.
        execution_count: node executions in this run.
        execution_time_ms: wall time of the run (across resumes).
        resumed: whether this invocation continued an earlier, unfinished run.
        invocation_state: the dict passed to the invocation (the same object), not persisted.
    """

    model_config = ConfigDict(extra="ignore")

    status: Status
    results: dict[str, NodeResult] = Field(default_factory=dict)
    execution_order: list[str] = Field(default_factory=list)
    output: Any = None
    reason: str | None = None
    error: str | None = None
    interrupts: list[Interrupt] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    execution_count: int = 0
    execution_time_ms: float = 0.0
    resumed: bool = False
    invocation_state: Any = Field(default=None, exclude=True)

    @property
    def text(self) -> str:
        return output_text(self.output)

    def __str__(self) -> str:
        """The output; for a run that stopped without one, its status and why (``failed: node ...``)."""
        if self.output is None and self.status != Status.COMPLETED and self.reason:
            return f"{self.status.value}: {self.reason}"
        return self.text


class GraphResult(MultiAgentResult):
    """A Graph run's outcome, with node counts."""

    total_nodes: int = 0
    completed_nodes: int = 0
    failed_nodes: int = 0


class SwarmResult(MultiAgentResult):
    """A Swarm run's outcome, with the agents in the order they held the task and every handoff."""

    node_history: list[str] = Field(default_factory=list)
    handoffs: list[dict[str, Any]] = Field(default_factory=list)
    shared_context: dict[str, Any] = Field(default_factory=dict)
