"""An agent's hold (one invocation at a time) and ``AgentStream``, the events of a streamed invocation."""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import Any

from orchestra.agent._loop import Invocation, run_invocation
from orchestra.agent.result import AgentStreamEvent
from orchestra.errors import ConcurrencyError

__all__ = ["AgentStream", "Hold", "Owner"]


class Owner:
    """Who holds an agent now: at most one operation at a time (an invocation, a direct tool call)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: Hold | None = None

    def hold(self, agent_name: str, what: str) -> Hold:
        """A hold for one operation, taken when its block is entered."""
        return Hold(self, agent_name, what)

    def take(self, hold: Hold) -> None:
        with self._lock:
            if self._holder is not None:
                raise ConcurrencyError(
                    f"agent {hold.agent_name!r} is already running an invocation; an agent runs one "
                    f"invocation at a time (this {hold.what} overlapped it). Create one agent per "
                    "concurrent conversation, or await the first invocation."
                )
            self._holder = hold

    def give_back(self, hold: Hold) -> None:
        with self._lock:
            if self._holder is hold:
                self._holder = None


class Hold:
    """One operation's hold on an agent; releasing it twice, or after it was taken over, does nothing."""

    __slots__ = ("_owner", "agent_name", "what")

    def __init__(self, owner: Owner, agent_name: str, what: str) -> None:
        self._owner = owner
        self.agent_name = agent_name
        self.what = what

    def __enter__(self) -> None:
        self._owner.take(self)

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        self._owner.give_back(self)


class AgentStream(AsyncGenerator[AgentStreamEvent, None]):
    """The events of one invocation (what ``Agent.stream_async`` returns).

    The first event takes the agent's hold (an overlapping invocation raises ``ConcurrencyError``); the
    end of the stream, an error, ``aclose()`` or ``aclosing`` releases it. A stream dropped before its
    end (``async for ...: break`` without ``aclosing``) is abandoned: the moment it is garbage (at once
    in CPython), the history is rolled back and the agent released, so the next call never meets a
    ``ConcurrencyError`` from a stream nobody reads.
    """

    def __init__(self, hold: Hold, start: Callable[[], Invocation], log: Any = None) -> None:
        self._hold = hold
        self._start_invocation = start
        self._invocation: Invocation | None = None
        # run_invocation's generator refers to the invocation, never to this object, so a dropped stream
        # is garbage at once instead of living on in a reference cycle.
        self._events: AsyncGenerator[AgentStreamEvent, None] | None = None
        self._finished = False
        self._log = log

    def _start(self) -> AsyncGenerator[AgentStreamEvent, None]:
        if self._finished:
            raise StopAsyncIteration
        self._hold.__enter__()
        try:
            self._invocation = self._start_invocation()
        except BaseException:
            self._finish()
            raise
        if self._log is not None:
            self._log.debug("invocation.start")
        self._events = run_invocation(self._invocation)
        return self._events

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._hold.release()

    async def __anext__(self) -> AgentStreamEvent:
        events = self._events if self._events is not None else self._start()
        try:
            return await events.__anext__()
        except StopAsyncIteration:
            if self._log is not None:
                self._log.debug("invocation.end")
            self._finish()
            raise
        except BaseException:
            self._finish()
            raise

    async def asend(self, value: None) -> AgentStreamEvent:
        return await self.__anext__()

    async def athrow(
        self,
        typ: type[BaseException] | BaseException,
        val: object = None,
        tb: TracebackType | None = None,
    ) -> AgentStreamEvent:
        exc = typ if isinstance(typ, BaseException) else typ()
        if self._events is None:
            self._finished = True
            raise exc
        try:
            return await self._events.athrow(exc)
        finally:
            self._finish()

    async def aclose(self) -> None:
        if self._events is None:
            self._finished = True
            return
        try:
            await self._events.aclose()  # rolls the history back if the invocation had not finished
        finally:
            self._finish()

    def __del__(self) -> None:
        if not self._finished and self._invocation is not None:
            # Abandoned mid-invocation. The generator itself is closed later, by the event loop's
            # finalizer; by then the checkpoint and the hold are spent and it changes nothing.
            self._invocation.checkpoint.roll_back()
            self._finish()
