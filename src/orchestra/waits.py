"""Durable waits: a function node or tool sleeps until a time, or waits for a named event.

A wait is an interrupt (``orchestra.interrupts``) whose question is a time or an event name, so it is
saved, listed, answered and resumed the way every interrupt is, and completed nodes never run again:

- ``await orchestra.sleep(3600)`` (or ``until=``) asks ``{"wait": "timer", "until": <epoch seconds>}``;
  its answer is ``{"wait": "timer", "until": ...}`` once the clock passed ``until``;
- ``await orchestra.wait_for_event("payment", timeout=86400)`` asks ``{"wait": "event", "event":
  "payment", "deadline": <epoch seconds or None>}``; its answer is the event's payload, or a timeout.

The first call stops the run (saved INTERRUPTED, its open question a wait) and the process lets go.
Whoever wakes the run (a server's sweep, ``orchestra resume``, or ``answers_due`` from Python) answers the
wait; the node then runs again from its start and the call returns its answer. Each wait in one
execution of a node (or one tool call) has its own id (``orchestra.wait.1``, ``.2``, ...), so a node
that sleeps twice resumes past the first sleep. Waits need an async function or tool.

The clock is ``now()``: the real time plus the offset in the file that ``ORCHESTRA_TEST_CLOCK`` names, a
test facility that lets a test pass an hour without waiting it (see docs/waiting.md).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from orchestra.errors import ConfigurationError
from orchestra.interrupts import Interrupt, InterruptException

__all__ = [
    "CLOCK_ENV",
    "WAIT_PREFIX",
    "EventResult",
    "Wait",
    "WaitNode",
    "answers_due",
    "event_answer",
    "is_wait_answer",
    "now",
    "open_waits",
    "parse_duration",
    "parse_time",
    "sleep",
    "wait_for_event",
    "waiting_scope",
]

CLOCK_ENV = "ORCHESTRA_TEST_CLOCK"
WAIT_PREFIX = "orchestra.wait"


def now() -> float:
    """The waits' clock, in epoch seconds: real time, plus the test clock's offset if one is set."""
    path = os.environ.get(CLOCK_ENV)
    if not path:
        return time.time()
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read().strip()
    except FileNotFoundError:
        return time.time()
    return time.time() + (float(text) if text else 0.0)


class _Asker(Protocol):
    def interrupt(self, name: str, reason: Any = None) -> Any: ...


@runtime_checkable
class _Remembers(Protocol):
    def asked_before(self, interrupt_id: str) -> Any: ...


@dataclass
class _Scope:
    """What waits in one node execution or tool call share: who asks, and how many waits it made."""

    asker: _Asker
    count: int = field(default=0)


_scope: ContextVar[_Scope | None] = ContextVar("orchestra_wait_scope", default=None)


@contextlib.contextmanager
def waiting_scope(asker: _Asker) -> Iterator[None]:
    """Where waits may be made: the runner of a function node or tool enters one around the call."""
    token = _scope.set(_Scope(asker))
    try:
        yield
    finally:
        _scope.reset(token)


def _ask(reason: dict[str, Any]) -> Any:
    scope = _scope.get()
    if scope is None:
        raise ConfigurationError(
            f"orchestra.{'sleep' if reason['wait'] == 'timer' else 'wait_for_event'}() works in an async "
            "function node or tool of a run (it saves the run as waiting); outside one, use anyio.sleep"
        )
    scope.count += 1
    try:
        return scope.asker.interrupt(f"{WAIT_PREFIX}.{scope.count}", reason)
    except InterruptException as signal:
        # The same wait asked again (its node ran again without an answer): it keeps its first time.
        earlier = (
            scope.asker.asked_before(signal.interrupt.id) if isinstance(scope.asker, _Remembers) else None
        )
        if isinstance(earlier, Mapping) and earlier.get("wait") == reason["wait"]:
            signal.interrupt.reason = dict(earlier)
        raise


def _seconds(value: float | timedelta) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if math.isnan(seconds) or seconds < 0:
        raise ConfigurationError(f"a wait needs a duration of 0 seconds or more, not {value!r}")
    return seconds


def _epoch(value: datetime | float) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigurationError(
                f"sleep(until=...) needs an aware datetime (with a time zone): {value!r}"
            )
        return value.timestamp()
    return float(value)


async def sleep(duration: float | timedelta | None = None, *, until: datetime | float | None = None) -> None:
    """Sleep durably for ``duration`` (seconds or a timedelta) or until ``until`` (an aware datetime or
    epoch seconds): the run is saved waiting and resumes once the time has passed, in any process.

    Raises:
        ConfigurationError: neither or both of ``duration`` and ``until``; called outside a run's async
            function node or tool.
    """
    if (duration is None) == (until is None):
        raise ConfigurationError("sleep() takes a duration or until=, not both and not neither")
    wake = now() + _seconds(duration) if duration is not None else _epoch(until)  # type: ignore[arg-type]
    _ask({"wait": "timer", "until": wake})


@dataclass(frozen=True)
class EventResult:
    """What ``wait_for_event`` returns: the event's payload, or ``timed_out`` (payload None)."""

    name: str
    payload: Any = None
    timed_out: bool = False


async def wait_for_event(
    name: str,
    *,
    timeout: float | timedelta | None = None,  # noqa: ASYNC109 - a durable deadline (the issue's API)
) -> EventResult:
    """Wait durably for the event ``name`` (sent from outside: HTTP, the client, the CLI or Python): the
    run is saved waiting; it resumes with the event's payload, or once ``timeout`` passed with
    ``timed_out=True``. An event sent before the wait began is kept and taken by it.

    Raises:
        ConfigurationError: a blank name or negative timeout; called outside a run's async function node
            or tool.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"wait_for_event() needs an event name, not {name!r}")
    deadline = None if timeout is None else now() + _seconds(timeout)
    answer = _ask({"wait": "event", "event": name, "deadline": deadline})
    if isinstance(answer, Mapping) and answer.get("wait") == "event":
        return EventResult(name, answer.get("payload"), bool(answer.get("timed_out")))
    return EventResult(name, answer)  # answered by hand (orchestra resume --respond): the answer itself


@dataclass(frozen=True)
class Wait:
    """An open wait, read from an interrupt: a timer (``until``) or an event (``event``, ``deadline``)."""

    interrupt_id: str
    kind: Literal["timer", "event"]
    until: float | None = None
    event: str | None = None
    deadline: float | None = None

    @property
    def due(self) -> float | None:
        """When it ends by itself (a timer's time, an event's deadline; None: only an event ends it)."""
        return self.until if self.kind == "timer" else self.deadline

    @classmethod
    def of(cls, interrupt: Interrupt | Mapping[str, Any]) -> Wait | None:
        """The wait an interrupt asks, or None for any other question."""
        raw = interrupt.model_dump() if isinstance(interrupt, Interrupt) else interrupt
        reason = raw.get("reason")
        if not str(raw.get("name", "")).startswith(WAIT_PREFIX) or not isinstance(reason, Mapping):
            return None
        if reason.get("wait") == "timer":
            return cls(str(raw["id"]), "timer", until=float(reason["until"]))
        if reason.get("wait") == "event":
            deadline = reason.get("deadline")
            return cls(str(raw["id"]), "event", event=str(reason["event"]), deadline=_float(deadline))
        return None

    def summary(self) -> dict[str, Any]:
        """The wait as JSON (a run record's ``waiting``): its id, kind, and times as ISO 8601."""
        found: dict[str, Any] = {"interrupt_id": self.interrupt_id, "kind": self.kind}
        if self.kind == "timer":
            found["until"] = _iso(self.until)
        else:
            found.update(event=self.event, deadline=None if self.deadline is None else _iso(self.deadline))
        return found

    def describe(self) -> str:
        """One line for people: what it waits for, and until when."""
        if self.kind == "timer":
            return f"a timer until {_iso(self.until)}"
        limit = f" (deadline {_iso(self.deadline)})" if self.deadline is not None else ""
        return f"the event {self.event!r}{limit}"


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _iso(epoch: float | None) -> str:
    return "never" if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def open_waits(interrupts: Iterable[Interrupt | Mapping[str, Any]]) -> list[Wait]:
    """The waits among open interrupts (``result.interrupts``, a run record's ``interrupts``)."""
    return [wait for wait in (Wait.of(i) for i in interrupts) if wait is not None]


def event_answer(wait: Wait, payload: Any = None, *, timed_out: bool = False) -> dict[str, Any]:
    """The answer that ends an event wait: the payload, or a timeout."""
    if timed_out:
        return {"wait": "event", "event": wait.event, "timed_out": True}
    return {"wait": "event", "event": wait.event, "payload": payload}


def answers_due(waits: Iterable[Wait], at: float | None = None) -> dict[str, Any]:
    """``{interrupt_id: answer}`` for the waits that ended by themselves at ``at`` (default ``now()``):
    timers whose time passed, event waits whose deadline passed (a timeout). Pure: the caller answers."""
    at = now() if at is None else at
    due: dict[str, Any] = {}
    for wait in waits:
        if wait.kind == "timer" and wait.until is not None and wait.until <= at:
            due[wait.interrupt_id] = {"wait": "timer", "until": wait.until}
        elif wait.kind == "event" and wait.deadline is not None and wait.deadline <= at:
            due[wait.interrupt_id] = event_answer(wait, timed_out=True)
    return due


def is_wait_answer(answer: Any) -> bool:
    """Whether an interrupt's answer is a wait's (kept for the rest of its node's execution)."""
    return isinstance(answer, Mapping) and answer.get("wait") in ("timer", "event")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")


def parse_duration(value: float | str) -> float:
    """Seconds from a number, or a text such as ``90s``, ``15m``, ``2h``, ``1d``, ``1w`` or ``1h30m``.

    Raises:
        ValueError: anything else (the message says what is accepted).
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return _seconds(value)
    text, seconds, at = value.strip(), 0.0, 0
    while at < len(text):
        part = _PART.match(text, at)
        if part is None:
            break
        seconds, at = seconds + float(part[1]) * _UNITS[part[2]], part.end()
    if not text or at != len(text):
        raise ValueError(f"not a duration: {value!r}; write seconds, or e.g. 90s, 15m, 2h, 1d, 1w, 1h30m")
    return seconds


def parse_time(value: str) -> float:
    """Epoch seconds from an ISO 8601 time with its zone (``2026-12-01T09:00:00Z``, ``...+01:00``).

    Raises:
        ValueError: not ISO 8601, or no zone.
    """
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {value!r}; write e.g. 2026-12-01T09:00:00Z") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone; add one, e.g. Z or +01:00")
    return parsed.timestamp()


class WaitNode:
    """What a YAML ``wait:`` node runs: a durable sleep or event wait, then the node's input passed on
    (a timer) or ``{"event", "payload", "timed_out"}`` (an event)."""

    def __init__(
        self,
        *,
        seconds: float | None = None,
        until: float | None = None,
        event: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.seconds, self.until, self.event, self.timeout = seconds, until, event, timeout

    async def __call__(self, node_input: Any) -> Any:
        if self.event is not None:
            got = await wait_for_event(self.event, timeout=self.timeout)
            return {"event": got.name, "payload": got.payload, "timed_out": got.timed_out}
        if self.until is not None:
            await sleep(until=self.until)
        else:
            await sleep(self.seconds)
        inputs = node_input.inputs
        if not inputs:
            return node_input.task
        return next(iter(inputs.values())) if len(inputs) == 1 else dict(inputs)
