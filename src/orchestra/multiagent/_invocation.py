"""The invocation's plumbing that does not depend on what runs: one invocation at a time, and the
answers to a run's open interrupts."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from orchestra.errors import ConcurrencyError, RunError
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent.results import Status

__all__ = ["Exclusive", "asked_interrupts", "collect_answers"]


class Exclusive:
    """Held while an orchestrator runs: a second, overlapping invocation raises ``ConcurrencyError``."""

    def __init__(self, kind: str, id: str, lock: threading.Lock) -> None:
        self._what = f"{kind} {id!r}"
        self._lock = lock

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            raise ConcurrencyError(f"{self._what} is already running; it runs one invocation at a time")

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def asked_interrupts(document: RunDocument) -> set[str]:
    """The interrupts an interrupted run waits on (asked, whether answered yet or not)."""
    if document.status != Status.INTERRUPTED:
        return set()
    run = document.run
    return {i["id"] for i in run.get("interrupts", [])} | set(run.get("answers") or {})


def collect_answers(document: RunDocument, what: str, new: Mapping[str, Any]) -> dict[str, Any]:
    """Record answers to open interrupts (in any order, over any number of invocations).

    The run record keeps the questions still open (``interrupts``) and the answers given so far
    (``answers``); returns every answer once no question is open.

    Raises:
        RunError: an answer names no interrupt the run asked.
    """
    run = document.run
    answers = dict(run.get("answers") or {})
    asked = {i["id"] for i in run["interrupts"]} | set(answers)
    unknown = sorted(set(new) - asked)
    if unknown:
        raise RunError(
            f"{what} has no open interrupt {unknown[0]!r}; its open interrupts: {', '.join(sorted(asked)) or 'none'}"
        )
    answers.update(new)
    still_open = [i for i in run["interrupts"] if i["id"] not in answers]
    document.update_run(interrupts=still_open, answers=answers)
    return answers
