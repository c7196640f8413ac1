"""The invocation's plumbing that does not depend on what runs: one invocation at a time, a run's events
as an async generator, and the answers to a run's open interrupts."""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

import anyio

from orchestra._concurrency import unwrap_group
from orchestra.errors import ConcurrencyError, RunError
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent.events import MultiAgentResultEvent
from orchestra.multiagent.nodes import Emit
from orchestra.multiagent.results import MultiAgentResult, Status

__all__ = ["Exclusive", "asked_interrupts", "collect_answers", "stream_events"]


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


async def stream_events(
    invoke: Callable[[Emit], Awaitable[MultiAgentResult]],
) -> AsyncGenerator[Any, None]:
    """Run ``invoke(emit)`` in a task and yield what it emits, then ``MultiAgentResultEvent``. Closing the
    generator early cancels the run (which saves it as interrupted); its error is raised as itself."""
    send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=1024)
    failure: list[Exception] = []

    async def produce() -> None:
        async with send:
            try:
                result = await invoke(send.send)
            except Exception as exc:
                failure.append(exc)  # raised below as it is, not wrapped in an ExceptionGroup
                return
            await send.send(MultiAgentResultEvent(result))

    closed = False
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            async with receive:
                try:
                    async for event in receive:
                        yield event
                except GeneratorExit:
                    # Closed early (aclose, aclosing): stop the run, which saves it as interrupted
                    # (resumable), and leave the task group normally.
                    closed = True
                    group.cancel_scope.cancel()
    except BaseExceptionGroup as group_error:
        raise unwrap_group(group_error) from None
    if closed:
        raise GeneratorExit
    if failure:
        raise failure[0]


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
