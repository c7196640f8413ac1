"""Run async calls concurrently and get the first failure back as itself, not as an ExceptionGroup; hold
a lock without adding a cancellation point."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

__all__ = ["held", "map_concurrently", "unwrap_group"]

T = TypeVar("T")
R = TypeVar("R")


async def map_concurrently(fn: Callable[[T], Awaitable[R]], items: Sequence[T], limit: int = 32) -> list[R]:
    """``[await fn(item) for item in items]``, run at most ``limit`` at a time, results in input order.

    The first exception cancels the remaining calls and is raised as it is, so callers catch the
    errors they know (``SnapshotError``, ``StorageUnavailableError``) instead of an ``ExceptionGroup``.
    """
    results: list[R | None] = [None] * len(items)
    errors: list[Exception] = []
    limiter = anyio.CapacityLimiter(max(1, limit))

    async with anyio.create_task_group() as group:

        async def run(index: int, item: T) -> None:
            try:
                async with limiter:
                    results[index] = await fn(item)
            except Exception as exc:
                errors.append(exc)
                group.cancel_scope.cancel()

        for index, item in enumerate(items):
            group.start_soon(run, index, item)
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]  # every slot was filled: no error occurred


def unwrap_group(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error a caller should see for an exception group from a task group.

    One error (cancellations aside) is returned as itself; several become ``MultipleNodeErrors``.
    """
    from orchestra.errors import MultipleNodeErrors

    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        current = stack.pop()
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
        else:
            leaves.append(current)
    cancelled = anyio.get_cancelled_exc_class()
    errors = [e for e in leaves if not isinstance(e, cancelled)]
    if not errors:
        return leaves[0]
    if len(errors) == 1:
        return errors[0]
    return MultipleNodeErrors(errors)


@contextlib.asynccontextmanager
async def held(lock: anyio.Lock) -> AsyncIterator[None]:
    """Hold ``lock``; taking it when it is free is no cancellation point (``anyio.Lock`` checks for a
    cancellation even then). Session saves hold one: a save that had no await before it had a lock (a
    run's last save on memory storage) must not become one that a closed stream cancels half way."""
    try:
        lock.acquire_nowait()
    except anyio.WouldBlock:
        await lock.acquire()
    try:
        yield
    finally:
        lock.release()
