"""Run async code from sync facades (``agent("hi")``, ``graph("task")``), even inside a running loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

import anyio

__all__ = ["run_sync"]

P = ParamSpec("P")
T = TypeVar("T")


def _in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_sync(fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn(*args, **kwargs)`` to completion and return its result.

    Without a running event loop this is ``anyio.run``. Inside one (a notebook, an async web handler)
    the loop's thread cannot block on itself, so the call runs on a fresh loop in a worker thread.
    """

    async def call() -> T:
        return await fn(*args, **kwargs)

    if not _in_running_loop():
        return anyio.run(call)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="orchestra-sync") as pool:
        return pool.submit(anyio.run, call).result()
