"""One request to run a hosted agent or pipeline: its task or its answers to open interrupts, its
session or history, and how it asked to be run (policy, background, webhook, Idempotency-Key)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from orchestra import tracing
from orchestra.hosting.config import HostedSpec, OnBusy
from orchestra.hosting.identity import memory_subject, owner
from orchestra.hosting.records import Mode, RunRecord
from orchestra.session import uuid7

__all__ = ["Invocation", "input_text"]

_INPUT_KEYS = ("message", "prompt", "query", "input", "text", "task")


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
    """One request to run a hosted agent: a task, or answers to its open interrupts (``responses``)."""

    def __init__(
        self,
        hosted: HostedSpec,
        task: str | None,
        session_id: str | None,
        history: list[dict[str, str]] | None,
        *,
        responses: dict[str, Any] | None = None,
        on_busy: OnBusy = "reject",
    ) -> None:
        self.hosted = hosted
        self.task = task
        self.session_id = session_id
        self.history = history
        self.responses = responses
        self.on_busy: OnBusy = on_busy
        self.mode: Mode = "session" if session_id else "stateless" if history is not None else "none"
        self.run_id = str(uuid7())
        self.trace_headers: dict[str, str] = {}  # the request's traceparent/tracestate, if any
        self.idempotency_key: str | None = None
        self.fingerprint = ""  # of the request's body, which a repeat with the same key must match
        # Set when this request runs again what an earlier one with its key left undone.
        self.prior: RunRecord | None = None
        self.background = False
        self.subject = memory_subject()  # the user auth names, if any: whose memory the run reads and writes
        self.webhook: str | None = None
        self.resume = False  # POST .../sessions/{sid}/resume: finish what the session left open
        # Its session is held on this server only, without the busy document (slots.hold_plain).
        self.held_here = False
        # Its session's agent is kept between turns (a plain or enqueue message: Runtime._uses_cache).
        self.keeps_agent = False
        self.metadata: dict[str, str] = {}  # given at start, kept in the run record (searchable)
        self.owner = owner()  # the caller's user, recorded on its run (identity.py)
        self.admitted = False  # the caller may run it (RunService.admit)
        self.on_workers = False  # moved to the Temporal workers (else where its pipeline runs: workers.py)

    @property
    def answers(self) -> dict[str, Any] | None:
        """The protocol front doors' name for ``responses`` (A2A's input-required, an MCP tool call)."""
        return self.responses

    @answers.setter
    def answers(self, value: dict[str, Any] | None) -> None:
        self.responses = value or None

    @property
    def fresh(self) -> bool:
        """A pipeline message sent with interrupt or rollback starts a new run, never resumes one."""
        return self.on_busy in ("interrupt", "rollback") and self.prior is None

    @classmethod
    def of_record(cls, hosted: HostedSpec, record: RunRecord) -> Invocation:
        """The invocation a stored run record stands for (a queued run, or one taken over)."""
        invocation = cls(
            hosted,
            record.input
            if isinstance(record.input, str) or record.input is None
            else input_text(record.input),
            record.session_id,
            record.caller_messages,
            responses={r["interrupt_id"]: r.get("response") for r in record.responses} or None,
            on_busy=record.on_busy or "reject",  # type: ignore[arg-type]
        )
        invocation.mode = record.mode
        invocation.run_id = record.run_id
        invocation.background = record.background
        invocation.webhook = record.webhook
        invocation.resume = record.resume
        invocation.metadata = dict(record.metadata)
        invocation.owner = record.owner
        if "memory_subject" in record.model_fields_set:  # its user's memory, whichever server goes on
            invocation.subject = record.memory_subject
        invocation.on_workers = record.workflow_id is not None
        return invocation

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
