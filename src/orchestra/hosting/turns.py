"""One hosted run, from the built target to its final record: run it (stoppable, its events to a log),
apply a stop the way its mode says (``signals.py``), and fill in the record and how it is answered."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel

from orchestra._concurrency import unwrap_group
from orchestra.agent import Agent, AgentResult
from orchestra.agent.result import ResultEvent
from orchestra.agent.state import JSONState
from orchestra.errors import SessionConflictError, StorageError
from orchestra.history import history_problems
from orchestra.hosting.events import EventLog, stream_event
from orchestra.hosting.interrupts import open_interrupts, response_blocks
from orchestra.hosting.outcomes import Failure, NothingToResume, failure_of
from orchestra.hosting.runs import RunRecord, RunStore
from orchestra.hosting.signals import Stop, StopRequest
from orchestra.messages import MessageDict
from orchestra.multiagent import Graph, MultiAgentBase, Swarm
from orchestra.multiagent.events import MultiAgentResultEvent
from orchestra.multiagent.results import MultiAgentResult, output_text
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session.scopes import discard_run, stored_by

if TYPE_CHECKING:
    from orchestra.hosting.runtime import Invocation
    from orchestra.storage import Storage

# Every request loads its session, so the server folds the journal often: a load reads at most 16 records.
SERVER_COMPACTION = Compaction(min_bytes=8 * 1024, ratio=2.0, max_records=16)

__all__ = [
    "INTERRUPTED_NOTE",
    "SERVER_COMPACTION",
    "Stopped",
    "claiming",
    "close_partial_turn",
    "finish",
    "recorded_failure",
    "run_target",
    "settle_stop",
    "terminal_event",
]

INTERRUPTED_NOTE = "(interrupted by a newer message)"
"""What closes the completed part of a turn stopped by the ``interrupt`` policy: the model sees it."""


@dataclass
class Stopped:
    """A run that a stop request ended before its outcome was decided."""

    request: StopRequest
    partial: list[MessageDict] = field(default_factory=list)  # an agent's turn so far, when it stopped
    status: str = "interrupted"  # or rolled_back
    stored: bool | None = False  # whether any of it is in the session (None: not known)
    note: str | None = None


async def run_target(
    target: Agent | MultiAgentBase, invocation: Invocation, task: Any, stop: Stop, log: EventLog | None
) -> Any:
    """Run ``target`` within ``stop``'s cancel scope; its outcome, or ``Stopped``."""
    prompt: Any = response_blocks(invocation.responses) if invocation.responses else task
    options: dict[str, Any] = {}
    if invocation.resume:  # POST .../sessions/{sid}/resume: finish what the session left open
        prompt = None
        _check_something_to_resume(target)
    if isinstance(target, Agent):
        stop.watch(target.messages)  # its turn so far is taken when a stop comes, before it unwinds
    elif not invocation.resume:
        options = {"resume_unfinished": True, "fresh": invocation.fresh and not invocation.responses}
    with stop.scope():
        if log is None:
            return await target.invoke_async(prompt, **options)
        outcome: Any = None
        watch = _StateWatch(target.state, log)
        async for event in target.stream_async(prompt, **options):
            watch.check()
            if isinstance(event, ResultEvent | MultiAgentResultEvent):
                outcome = event.result
                continue
            converted = stream_event(event)
            if converted is not None:
                log.append(*converted)
        return outcome
    assert stop.request is not None
    return Stopped(stop.request, stop.partial)


class _StateWatch:
    """Sends a run's state (an agent's, a pipeline's shared state) as ``state`` events: as the run starts
    (unless empty), then whole after each change, checked as each of the run's events arrives."""

    def __init__(self, state: JSONState, log: EventLog) -> None:
        self.state = state
        self.log = log
        self.version = state.version
        self.sent = "{}"
        self.check(force=True)

    def check(self, *, force: bool = False) -> None:
        if self.state.version == self.version and not force:
            return
        self.version = self.state.version
        now = self.state.to_dict()
        text = json.dumps(now, sort_keys=True)  # as JSON: 1 and true differ
        if text != self.sent:
            self.sent = text
            self.log.append("state", now)


def _check_something_to_resume(target: Agent | MultiAgentBase) -> None:
    """An agent's open turn (cut by a crash), or a pipeline's unfinished run; else ``NothingToResume``."""
    if isinstance(target, Agent):
        if target.open_turn() is None:
            raise NothingToResume("the session has no open turn to resume: send a message instead")
    elif target.status.value not in ("executing", "failed", "interrupted"):
        raise NothingToResume("the session has no unfinished run to resume: send a task instead")


async def claiming(
    record: RunRecord, runs: RunStore, agent: Agent, turn: Callable[[], Awaitable[Any]]
) -> Any:
    """Run an agent's turn while its run record is written as "executing" beside it: the turn's save
    waits for the record (``before_save``), so a turn the session stores always has its record, and with
    a real model the write costs the turn nothing."""
    manager = agent.session_manager
    assert isinstance(manager, SnapshotSessionManager)
    written = anyio.Event()
    errors: list[Exception] = []

    async def claim() -> None:
        try:
            await runs.save(record)
        except Exception as exc:
            errors.append(exc)
        finally:
            written.set()

    async def before_save() -> None:
        await written.wait()
        if errors:
            raise errors[0]

    manager.before_save = before_save
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(claim)
            result = await turn()
    except BaseExceptionGroup as group_error:
        raise unwrap_group(group_error) from None
    finally:
        manager.before_save = None
    if errors and not isinstance(result, Stopped):
        raise errors[0]  # no save came to wait for it (the turn stored nothing): say why anyway
    return result


def close_partial_turn(partial: list[MessageDict]) -> list[MessageDict]:
    """The completed steps of a stopped turn, closed so that the history stays valid: a step whose
    tool calls have no results yet is left out, and an assistant note ends the turn."""
    kept = list(partial)
    if kept and kept[-1]["role"] == "assistant" and any("toolUse" in b for b in kept[-1]["content"]):
        kept.pop()
    if not kept:
        return []
    if kept[-1]["role"] == "user":
        kept.append({"role": "assistant", "content": [{"text": INTERRUPTED_NOTE}]})
    return kept


async def settle_stop(
    outcome: Stopped,
    target: Agent | MultiAgentBase | None,
    invocation: Invocation,
    record: RunRecord,
    storage: Storage,
) -> Stopped:
    """Apply a stop the way its mode says (see ``signals.py``); what is in the session afterwards is what
    ``outcome`` says (``stored``)."""
    mode = outcome.request.mode
    outcome.status = "rolled_back" if mode == "rollback" else "interrupted"
    session_id = invocation.session_id
    if invocation.mode != "session" or target is None or session_id is None:
        return outcome
    where = (storage, target, session_id, record.run_id, record.started_at)
    stored = await stored_by(*where)
    # A side-effecting tool of an agent's turn had run: the turn was kept open (and saved) rather than
    # rolled back, so that the effect is never lost nor run twice. It stays, whatever the mode: the
    # session's next request (or POST .../sessions/{sid}/resume) finishes it first.
    if isinstance(target, Agent) and target.open_turn() is not None:
        outcome.status, outcome.stored = "interrupted", True
        outcome.note = (
            "a side-effecting tool of its turn had run, so the turn is kept open, not discarded: the "
            "session's next request finishes it first"
        )
        return outcome
    if mode == "rollback":
        if stored and not await discard_run(*where, SERVER_COMPACTION):
            outcome.status, outcome.stored = "interrupted", True
            outcome.note = (
                "it could not be rolled back (the session's records before it were folded away); its "
                "completed work is kept"
            )
        return outcome
    if isinstance(target, MultiAgentBase):
        outcome.stored = stored  # saved as interrupted: its completed nodes are kept
        return outcome
    if stored:  # the stop came after the turn was stored: it stands
        outcome.status, outcome.stored = "completed", True
        outcome.note = "the stop came after the turn was stored; it was kept"
        return outcome
    if mode == "interrupt":
        partial = outcome.partial
        if not partial and invocation.task is not None and not invocation.responses:
            # Stopped before its message reached the history: the message is kept all the same.
            partial = [{"role": "user", "content": [{"text": invocation.task}]}]
        kept = close_partial_turn(partial)
        if kept and not history_problems([*target.messages, *kept]):
            target.messages.extend(kept)
            manager = target.session_manager
            assert isinstance(manager, SnapshotSessionManager)
            try:
                await manager.save_snapshot(target)
            except (StorageError, SessionConflictError) as exc:
                del target.messages[-len(kept) :]
                outcome.stored = getattr(exc, "stored", False)
                outcome.note = f"its completed steps could not be stored: {exc}"
                return outcome
            outcome.stored = True
    return outcome


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


def recorded_failure(record: RunRecord) -> Failure | None:
    """How a recorded run was answered, to answer a repeat (or a follower) the same way."""
    if record.http_status in (None, 200):
        return None
    return Failure(record.http_status, record.error_code or "run_failed", record.error or "the run failed")


def terminal_event(record: RunRecord, failure: Failure | None) -> tuple[str, Any]:
    """A run's last event: ``result`` (the answer) or ``error`` (what a plain request would get)."""
    if failure is None:
        return "result", record.answer()
    message = record.error if failure.code == "run_failed" and record.error else failure.message
    detail: dict[str, Any] = {"code": failure.code, "message": message}
    if failure.retry_after is not None:
        detail["retry_after"] = failure.retry_after
    return "error", {"error": detail, "run_id": record.run_id, "status": record.status}


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


def edges_of(target: MultiAgentBase) -> list[list[str]]:
    if isinstance(target, Graph):
        return [[e.src, e.dst, "condition" if e.condition else ""] for e in target.edges]
    if isinstance(target, Swarm):
        names = list(target.nodes)
        return [[a, b, "handoff"] for a in names for b in names if a != b]
    return []
