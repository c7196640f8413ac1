"""Waits in ``orchestra run`` and ``resume`` (docs/waiting.md).

A run whose open questions are all waits (``orchestra.sleep``, ``wait_for_event``, a ``wait:`` node) is
already saved when it stops. If the first of them ends within ``ORCHESTRA_WAIT_HERE_S`` seconds (60 by
default), the command waits here, checking the session's inbox for events every second, and answers it
(``orchestra resume`` of a due run does the same at once). A longer wait, or an event wait without a
near deadline, ends the command with exit code 5 and the command that wakes the run once it is due.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import typer

from orchestra.cli._output import EXIT_WAITING, err
from orchestra.inbox import answers_for, session_inbox
from orchestra.interrupts import Interrupt
from orchestra.waits import Wait, now, open_waits

__all__ = ["WAIT_HERE_ENV", "report_waiting", "wait_here", "waits_here", "waits_of"]

WAIT_HERE_ENV = "ORCHESTRA_WAIT_HERE_S"
_WAIT_HERE_S = 60.0
_POLL_S = 1.0


def _threshold() -> float:
    raw = os.environ.get(WAIT_HERE_ENV)
    return float(raw) if raw else _WAIT_HERE_S


def waits_here(waits: list[Wait]) -> bool:
    """Whether the first of ``waits`` ends by itself within the threshold (waited in this process)."""
    dues = [w.due for w in waits if w.due is not None]
    return bool(dues) and min(dues) - now() <= _threshold()


def waits_of(interrupts: list[Interrupt] | list[dict[str, Any]]) -> list[Wait] | None:
    """The waits, when every open question is one (None: a human's question is open, or none is)."""
    waits = open_waits(interrupts)
    return waits if waits and len(waits) == len(interrupts) else None


def _storage(target: Any) -> Any:
    return getattr(getattr(target, "session_manager", None), "storage", None)


async def due_answers(target: Any, waits: list[Wait], session_id: str) -> dict[str, Any]:
    """The answers of the waits that can end now (the session's inbox decides events)."""
    storage = _storage(target)
    inbox = session_inbox(storage, session_id) if storage is not None else None
    return await answers_for(waits, inbox)


async def wait_here(target: Any, result: Any, session_id: str, again: Callable[[Any], Awaitable[Any]]) -> Any:
    """Wait in this process for the run's waits that end soon, answer them and run on (see the module
    docstring); the last result, waiting or not."""
    while True:
        interrupts = getattr(result, "interrupts", None) or []
        waits = waits_of(interrupts)
        if waits is None:
            return result
        answers = await due_answers(target, waits, session_id)
        if not answers:
            dues = [w.due for w in waits if w.due is not None]
            events = any(w.kind == "event" for w in waits)
            if not dues or min(dues) - now() > _threshold():
                return result
            await anyio.sleep(
                min(max(min(dues) - now(), 0.0), _POLL_S) if events else max(min(dues) - now(), 0)
            )
            continue
        blocks = [{"interruptResponse": {"interruptId": i, "response": a}} for i, a in answers.items()]
        result = await again(blocks)


def report_waiting(waits: list[Wait], again: str) -> typer.Exit:
    """Say what the run waits for and how to wake it; raise the returned exit (code 5)."""
    err.print("[cyan]waiting[/]: the run is saved; it waits for:")
    for wait in waits:
        err.print(f"  {wait.interrupt_id}  {wait.describe()}", highlight=False, markup=False)
    if any(w.kind == "event" for w in waits):
        err.print(
            "Send an event from Python: orchestra.inbox.session_inbox(storage, session_id).send(name, "
            "payload, key); then wake the run.",
            highlight=False,
            markup=False,
        )
    err.print(f"Wake it once due with: {again}", highlight=False, markup=False)
    return typer.Exit(EXIT_WAITING)
