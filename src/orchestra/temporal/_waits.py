"""Durable waits on Temporal (docs/waiting.md): a wait's time is a workflow timer, and an event is the
``send_event`` signal. The workflow keeps the run's events in an inbox document of its own, decided by
the same pure functions as the storage inbox (``orchestra.inbox.keep`` / ``decide``), so an event is kept
once per key and taken by one wait; all of it is in the workflow's history, so it replays."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestra.inbox import EventKeyReused, decide, empty, keep
    from orchestra.waits import Wait, answers_due, open_waits

__all__ = ["WorkflowWaits", "all_waits"]


def all_waits(interrupts: list[dict[str, Any]]) -> list[Wait]:
    """The waits, when every open question is one (else none: a human answers with ``respond``)."""
    waits = open_waits(interrupts)
    return waits if waits and len(waits) == len(interrupts) else []


class WorkflowWaits:
    """The run's events, and how its waits end (see the module docstring)."""

    def __init__(self) -> None:
        self.inbox = empty()
        self.changed = False

    def send(self, event: dict[str, Any]) -> None:
        """Keep an event (``{"name", "payload", "key"}``); a key sent before is not a second event."""
        try:
            keep(
                self.inbox,
                str(event["name"]),
                event.get("payload"),
                str(event["key"]),
                workflow.now().timestamp(),
            )
        except EventKeyReused as exc:  # a signal cannot be refused: the first event with the key stands
            workflow.logger.warning(str(exc))
            return
        self.changed = True

    async def answers(
        self, waits: list[Wait], by_hand: Callable[[], dict[str, Any] | None]
    ) -> dict[str, Any]:
        """Wait (a timer until the first wait is due, or an event) until some wait can end; its answers. A
        ``respond`` signal (``by_hand``) answers them instead."""
        while True:
            answered = by_hand()
            if answered is not None:
                return answered
            at = workflow.now().timestamp()
            found: dict[str, Any] = {}
            for wait in waits:
                if wait.kind == "event":
                    answer, _ = decide(self.inbox, wait, at)
                else:
                    answer = answers_due([wait], at).get(wait.interrupt_id)
                if answer is not None:
                    found[wait.interrupt_id] = answer
            if found:
                return found
            dues = [w.due for w in waits if w.due is not None]
            self.changed = False
            timeout = max(min(dues) - at, 0.001) if dues else None
            with contextlib.suppress(TimeoutError):  # the timer fired: the first wait is due
                await workflow.wait_condition(lambda: self.changed or by_hand() is not None, timeout=timeout)
