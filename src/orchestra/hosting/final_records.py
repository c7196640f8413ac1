"""A run's final record, filled in from its outcome, and how a failure is answered (``outcomes.py``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from orchestra.agent import Agent, AgentResult
from orchestra.hosting.interrupts import open_interrupts
from orchestra.hosting.outcomes import Failure, failure_of
from orchestra.hosting.records import RunRecord
from orchestra.hosting.stopping import Stopped
from orchestra.messages import MessageDict
from orchestra.multiagent import Graph, MultiAgentBase, Swarm
from orchestra.multiagent.results import MultiAgentResult, output_text

__all__ = ["edges_of", "finish", "nodes_of"]


def finish(
    record: RunRecord, target: Agent | MultiAgentBase | None, outcome: Any, started: float
) -> Failure | None:
    """Fill in the final record; returns how a failure is answered (None: 200)."""
    record.finished_at = datetime.now(UTC).isoformat()
    record.duration_ms = round((time.perf_counter() - started) * 1000, 3)
    if record.caller_messages is not None:
        record.caller_messages = None
    failure = None
    if isinstance(outcome, Stopped):
        record.status, record.stored = outcome.status, outcome.stored
        if outcome.status == "completed" and isinstance(target, Agent):
            record.output = _last_reply(target.messages)
        record.stopped = {**outcome.request.to_json(), **({"note": outcome.note} if outcome.note else {})}
        if outcome.status == "rolled_back":
            failure = Failure(
                409,
                "run_rolled_back",
                f"run {record.run_id} was stopped and its turn discarded: a newer message to the session "
                f"(run {outcome.request.by}) replaced it",
                stored=False,
            )
            record.error_code, record.http_status = failure.code, failure.status
            record.error = failure.message
    elif isinstance(outcome, BaseException):
        failure = failure_of(outcome, record.run_id)
        record.status = "failed"
        record.error = f"{type(outcome).__name__}: {outcome}"
        record.error_code, record.http_status, record.stored = failure.code, failure.status, failure.stored
    elif isinstance(outcome, AgentResult):
        record.status = "interrupted" if outcome.stop_reason == "interrupt" else "completed"
        # A structured output is answered as JSON (an object), else the text.
        output = outcome.output
        record.output = output.model_dump(mode="json") if isinstance(output, BaseModel) else output
        if output is None:
            record.output = str(outcome)
        record.usage = _usage(outcome.metrics.usage)
        record.resumed = outcome.resumed
    else:
        assert isinstance(outcome, MultiAgentResult)
        record.status = outcome.status.value
        record.output = outcome.output
        record.error = outcome.reason if outcome.status.value == "failed" else None
        record.usage = _usage(outcome.usage)
        record.resumed = outcome.resumed
        if record.status == "failed":
            failure = Failure(502, "run_failed", f"{outcome.reason} (run {record.run_id})")
            record.error_code, record.http_status, record.stored = "run_failed", 502, False
    if failure is None:
        record.http_status = 200
        if not isinstance(outcome, Stopped):
            record.stored = record.mode == "session"
    if target is not None and record.status == "interrupted" and not isinstance(outcome, BaseException):
        record.interrupts = open_interrupts(target)
    if isinstance(target, Agent):
        # Stateless mode persists nothing of the caller's history: only what this turn added.
        record.messages = list(target.messages[record.caller_history :])
    elif target is not None:
        record.nodes = nodes_of(target, outcome if isinstance(outcome, MultiAgentResult) else None)
        record.edges = edges_of(target)
    return failure


def _last_reply(messages: list[MessageDict]) -> str:
    for message in reversed(messages):
        if message["role"] == "assistant":
            return "".join(b["text"] for b in message["content"] if "text" in b)
    return ""


def _usage(usage: Any) -> dict[str, int]:
    return dict(usage.model_dump(by_alias=False))


def nodes_of(target: MultiAgentBase, result: MultiAgentResult | None) -> dict[str, dict[str, Any]]:
    nodes: dict[str, dict[str, Any]] = {}
    for node_id, node in target.nodes.items():
        record = target.document.node(node_id) or {}
        node_result = result.results.get(node_id) if result else None
        nodes[node_id] = {
            "kind": node.kind,
            "status": record.get("status", "pending"),
            "executions": record.get("executions", 0),
            "output": output_text(node_result.output) if node_result else None,
            "execution_time_ms": node_result.execution_time_ms if node_result else None,
            "messages": list(node.agent.messages) if node.kind == "agent" else [],
        }
    return nodes


def edges_of(target: MultiAgentBase) -> list[list[str]]:
    if isinstance(target, Graph):
        return [[e.src, e.dst, "condition" if e.condition else ""] for e in target.edges]
    if isinstance(target, Swarm):
        names = list(target.nodes)
        return [[a, b, "handoff"] for a in names for b in names if a != b]
    return []
