"""Invoking hosted agents and pipelines in the three memory modes, one writer per session.

- **session** (``session_id``): the agent (or pipeline) is built fresh for the request and attached to a
  ``SnapshotSessionManager`` over the workspace's storage, which restores the whole conversation and
  saves the new turn. A pipeline whose last run in that session did not finish resumes it.
- **stateless** (``history``): the history is the agent's starting conversation (for a pipeline, it is
  put before the task as context); nothing is persisted.
- **none**: a fresh agent or pipeline, nothing persisted.

Within a process, invocations of one session run one after another in arrival order (a FIFO lock per
session). Across processes the storage's conditional writes decide: the writer that lost gets
``SessionConflictError``, which the API answers with 409 and ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio

from orchestra import tracing
from orchestra._concurrency import unwrap_group
from orchestra.agent import Agent, AgentResult
from orchestra.agent.agent import deferred_initialization
from orchestra.agent.result import MessageEvent, ResultEvent, TextChunkEvent, ToolCallEvent, ToolResultEvent
from orchestra.errors import SessionConflictError
from orchestra.multiagent import Graph, MultiAgentBase, Swarm
from orchestra.multiagent.events import (
    HandoffEvent,
    MultiAgentResultEvent,
    NodeStartEvent,
    NodeStopEvent,
    NodeStreamEvent,
)
from orchestra.multiagent.results import MultiAgentResult, output_text
from orchestra.server.config import HostedSpec, ServerConfig
from orchestra.server.runs import Mode, RunRecord, RunStore
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session._uuid7 import uuid7
from orchestra.spec import build
from orchestra.storage import LocalFileStorage, PrefixedStorage, Storage, storage_from_uri

__all__ = ["Invocation", "Runtime", "input_text"]

_INPUT_KEYS = ("message", "prompt", "query", "input", "text", "task")
# Every request loads its session, so the server folds the journal often: a load reads at most 16 records.
SERVER_COMPACTION = Compaction(min_bytes=8 * 1024, ratio=2.0, max_records=16)


def input_text(value: Any) -> str:
    """The task a request's ``input`` stands for: a string, the text under a usual key, or its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in _INPUT_KEYS:
            if isinstance(value.get(key), str):
                return str(value[key])
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:
            return strings[0]
    return json.dumps(value, sort_keys=True)


class Invocation:
    """One request to invoke a hosted agent."""

    def __init__(
        self,
        hosted: HostedSpec,
        task: str,
        session_id: str | None,
        history: list[dict[str, str]] | None,
    ) -> None:
        self.hosted = hosted
        self.task = task
        self.session_id = session_id
        self.history = history
        self.mode: Mode = "session" if session_id else "stateless" if history is not None else "none"
        self.run_id = str(uuid7())
        self.trace_headers: dict[str, str] = {}  # the request's traceparent/tracestate, if any

    def traced(self) -> Any:
        """The span of this invocation, continuing the caller's trace (``traceparent``) if it sent one."""
        attributes = {
            "orchestra.hosted.id": self.hosted.id,
            "orchestra.run.id": self.run_id,
            "orchestra.session.id": self.session_id,
            "orchestra.memory_mode": self.mode,
        }
        stack = contextlib.ExitStack()
        stack.enter_context(tracing.continued(self.trace_headers))
        stack.enter_context(
            tracing.span(f"invoke {self.hosted.id}", {k: v for k, v in attributes.items() if v})
        )
        return stack


def _history_messages(history: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"role": turn["role"], "content": [{"text": turn["content"]}]} for turn in history]


def _usage(usage: Any) -> dict[str, int]:
    return dict(usage.model_dump(by_alias=False))


class Runtime:
    """Builds and runs hosted agents and pipelines for the API (see the module docstring)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.root: Storage = storage_from_uri(config.storage)
        # Run records that need no fsync (see RunStore) go through the same files without it.
        self._unsynced_root: Storage = (
            LocalFileStorage(self.root.root, durable=False)
            if isinstance(self.root, LocalFileStorage)
            else self.root
        )
        # Weak values: a session's lock lives while a turn holds it or waits on it, then goes away, so
        # the table holds the sessions being served now, not every session ever seen.
        self._locks: weakref.WeakValueDictionary[tuple[str, str, str], anyio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._runs: dict[str, RunStore] = {}

    def storage(self, workspace: str) -> Storage:
        """The part of the storage that belongs to one workspace."""
        return PrefixedStorage(self.root, f"ws/{workspace}")

    def agent_storage(self, workspace: str, agent_id: str) -> Storage:
        """Where one hosted agent's sessions live: sessions are per agent, so one session id used with
        two agents gives two separate histories."""
        return PrefixedStorage(self.storage(workspace), f"agents/{agent_id}")

    def runs(self, workspace: str) -> RunStore:
        """The workspace's run records (one store per workspace: it holds the records not yet written)."""
        store = self._runs.get(workspace)
        if store is None:
            unsynced = PrefixedStorage(self._unsynced_root, f"ws/{workspace}")
            store = self._runs[workspace] = RunStore(self.storage(workspace), unsynced)
        return store

    async def flush_records(self, workspace: str) -> None:
        """Write the run records queued by finished invocations (after their answers were sent)."""
        await self.runs(workspace).flush()

    def _lock(self, workspace: str, agent_id: str, session_id: str) -> anyio.Lock:
        key = (workspace, agent_id, session_id)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = anyio.Lock()
        return lock

    async def _build(self, invocation: Invocation) -> Agent | MultiAgentBase:
        hosted = invocation.hosted
        loaded = self.config.spec_of(hosted.id)
        manager = None
        if invocation.session_id is not None:
            storage = self.agent_storage(hosted.workspace, hosted.id)
            manager = SnapshotSessionManager(
                invocation.session_id, storage=storage, compaction=SERVER_COMPACTION
            )
        with deferred_initialization():  # the session loads below, on this event loop, without blocking it
            built: Agent | MultiAgentBase = build(loaded, session_manager=manager)
        if isinstance(built, Agent):
            await built.initialize()
            if invocation.history is not None:
                built.messages = _history_messages(invocation.history)
        return built

    def _task(self, invocation: Invocation, target: Agent | MultiAgentBase) -> str:
        if isinstance(target, MultiAgentBase) and invocation.history:
            context = "\n".join(f"{turn['role']}: {turn['content']}" for turn in invocation.history)
            return f"Conversation so far:\n{context}\n\n{invocation.task}"
        return invocation.task

    def _record(self, invocation: Invocation, kind: str) -> RunRecord:
        return RunRecord(
            run_id=invocation.run_id,
            agent_id=invocation.hosted.id,
            kind=kind,
            mode=invocation.mode,
            session_id=invocation.session_id,
            started_at=datetime.now(UTC).isoformat(),
            input=invocation.task,
            caller_history=len(invocation.history or []) if invocation.mode == "stateless" else 0,
        )

    def _finish(
        self, record: RunRecord, target: Agent | MultiAgentBase, outcome: Any, started: float
    ) -> None:
        record.finished_at = datetime.now(UTC).isoformat()
        record.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        if isinstance(outcome, Exception):
            record.status = "failed"
            record.error = f"{type(outcome).__name__}: {outcome}"
        elif isinstance(outcome, AgentResult):
            record.status = "interrupted" if outcome.stop_reason == "interrupt" else "completed"
            # A structured output is answered as JSON (an object), else the text.
            record.output = outcome.output if outcome.output is not None else str(outcome)
            record.usage = _usage(outcome.metrics.usage)
        else:
            assert isinstance(outcome, MultiAgentResult)
            record.status = outcome.status.value
            record.output = outcome.output
            record.error = outcome.reason if outcome.status.value == "failed" else None
            record.usage = _usage(outcome.usage)
            record.resumed = outcome.resumed
        if isinstance(target, Agent):
            # Stateless mode persists nothing of the caller's history: only what this turn added.
            record.messages = list(target.messages[record.caller_history :])
        else:
            record.nodes = _nodes_of(target, outcome if isinstance(outcome, MultiAgentResult) else None)
            record.edges = _edges_of(target)

    async def invoke(self, workspace: str, invocation: Invocation) -> tuple[RunRecord, Any]:
        """Run an invocation to the end; returns its run record and the raw outcome (result or error).

        The final run record is queued: the caller answers, then calls ``flush_records``.

        A ``SessionConflictError`` outcome means another process saved the session first: this turn was
        not persisted (and gets no run record); the caller should retry.
        """
        async with self._session_turn(workspace, invocation):
            with invocation.traced():
                return await self._invoke(workspace, invocation)

    async def _invoke(self, workspace: str, invocation: Invocation) -> tuple[RunRecord, Any]:
        record = self._record(invocation, self.config.spec_of(invocation.hosted.id).spec.kind)
        runs = self.runs(workspace)
        try:
            target = await self._build_and_claim(invocation, record, runs)
        except Exception as exc:
            await runs.delete(record)  # the "executing" record of a turn that will store nothing
            if isinstance(exc, SessionConflictError):  # two processes created the session at once
                return record, exc
            raise
        started = time.perf_counter()
        outcome: Any
        try:
            if isinstance(target, MultiAgentBase):
                outcome = await target.invoke_async(self._task(invocation, target), resume_unfinished=True)
            else:
                outcome = await target.invoke_async(invocation.task)
        except Exception as exc:
            outcome = exc
        if isinstance(outcome, SessionConflictError):
            await runs.delete(record)  # nothing of this turn was stored
        else:
            self._finish(record, target, outcome, started)
            runs.save_later(record)  # a stored turn's "executing" record is durable already
        return record, outcome

    async def stream(self, workspace: str, invocation: Invocation) -> AsyncIterator[tuple[str, Any]]:
        """Run an invocation, yielding ``(event name, JSON data)`` as it goes; the last is ``result``/``error``."""
        async with self._session_turn(workspace, invocation), contextlib.AsyncExitStack() as stack:
            stack.enter_context(invocation.traced())
            record = self._record(invocation, self.config.spec_of(invocation.hosted.id).spec.kind)
            started = time.perf_counter()
            outcome: Any = None
            target: Agent | MultiAgentBase | None = None
            runs = self.runs(workspace)
            try:
                target = await self._build_and_claim(invocation, record, runs)
                if isinstance(target, MultiAgentBase):
                    events: AsyncIterator[Any] = target.stream_async(
                        self._task(invocation, target), resume_unfinished=True
                    )
                else:
                    events = target.stream_async(invocation.task)
                async for event in events:
                    if isinstance(event, ResultEvent | MultiAgentResultEvent):
                        outcome = event.result
                        continue
                    converted = _event(event)
                    if converted is not None:
                        yield converted
            except Exception as exc:
                outcome = exc
            if target is not None and not isinstance(outcome, SessionConflictError):
                self._finish(record, target, outcome, started)
                runs.save_later(record)
            else:
                if invocation.session_id is not None:
                    await runs.delete(record)  # the "executing" record of a turn that stored nothing
                record.status, record.error = "failed", f"{type(outcome).__name__}: {outcome}"
            if isinstance(outcome, SessionConflictError):
                yield ("conflict", record)  # another process saved this session first: retry the turn
            else:
                yield ("error", record) if isinstance(outcome, Exception) else ("result", record)

    async def _build_and_claim(
        self, invocation: Invocation, record: RunRecord, runs: RunStore
    ) -> Agent | MultiAgentBase:
        """Build the target (loading its session) and, in session mode, write the run record as "executing"
        meanwhile: a turn the session stores always has its record, even if this process dies right after
        the save (the record then stays "executing")."""
        if invocation.session_id is None:
            return await self._build(invocation)
        built: list[Agent | MultiAgentBase] = []

        async def build() -> None:
            built.append(await self._build(invocation))

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(build)
                group.start_soon(runs.save, record)
        except BaseExceptionGroup as group_error:
            raise unwrap_group(group_error) from None
        return built[0]

    def _session_turn(self, workspace: str, invocation: Invocation) -> Any:
        if invocation.session_id is None:
            return contextlib.nullcontext()
        return self._lock(workspace, invocation.hosted.id, invocation.session_id)


def _kind(target: Agent | MultiAgentBase) -> str:
    return "agent" if isinstance(target, Agent) else target.kind


def _nodes_of(target: MultiAgentBase, result: MultiAgentResult | None) -> dict[str, dict[str, Any]]:
    nodes: dict[str, dict[str, Any]] = {}
    for node_id, node in target.nodes.items():
        record = target._fields.get(f"node/{node_id}") or {}
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


def _edges_of(target: MultiAgentBase) -> list[list[str]]:
    if isinstance(target, Graph):
        return [[e.src, e.dst, "condition" if e.condition else ""] for e in target.edges]
    if isinstance(target, Swarm):
        names = list(target.nodes)
        return [[a, b, "handoff"] for a in names for b in names if a != b]
    return []


def _event(event: Any) -> tuple[str, Any] | None:
    """A stream event as an SSE event name and JSON data (None for events not worth sending)."""
    if isinstance(event, TextChunkEvent):
        return "text", {"text": event.text}
    if isinstance(event, ToolCallEvent):
        return "tool_call", event.tool_use
    if isinstance(event, ToolResultEvent):
        return "tool_result", event.result
    if isinstance(event, MessageEvent):
        return None
    if isinstance(event, NodeStartEvent):
        return "node_start", {"node_id": event.node_id, "execution_count": event.execution_count}
    if isinstance(event, NodeStopEvent):
        return "node_stop", {
            "node_id": event.node_id,
            "status": event.result.status.value,
            "output": event.result.text,
        }
    if isinstance(event, HandoffEvent):
        return "handoff", {"from": event.from_node, "to": event.to_node, "message": event.message}
    if isinstance(event, NodeStreamEvent):
        inner = _event(event.event)
        if inner is None:
            return None
        name, data = inner
        return name, {**data, "node_id": event.node_id} if isinstance(data, dict) else data
    return None
