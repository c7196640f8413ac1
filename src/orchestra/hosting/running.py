"""The runs and requests in progress on this server, and the events that wake whoever waits for them.

A repeated request waits here for its first request when that runs on this server; a follower of a run
wakes when it starts or ends here; a run's final record is readable once its event is set. Nothing here
touches storage: another server's runs are read from storage (``reader.py``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import Iterator

    from orchestra.hosting.events import EventLog

__all__ = ["Running"]


class Running:
    """This server's runs in progress (see the module docstring)."""

    def __init__(self) -> None:
        self.runs: dict[str, anyio.Event] = {}  # run id -> set when its final record is readable
        self.requests: dict[str, anyio.Event] = {}  # request's run id -> set when the request is answered
        self.logs: dict[str, EventLog] = {}  # the event logs of runs running here
        self._changed: dict[str, anyio.Event] = {}  # run id -> set when it starts or ends here

    def here(self, run_id: str) -> bool:
        """Whether ``run_id`` is running on this server now."""
        return run_id in self.runs

    def changed(self, run_id: str) -> anyio.Event:
        """An event set when ``run_id`` starts or ends on this server (``notify``)."""
        return self._changed.setdefault(run_id, anyio.Event())

    def notify(self, run_id: str) -> None:
        """Wake whoever waits here for ``run_id`` to start or end."""
        if not self._changed:
            return
        changed = self._changed.pop(run_id, None)
        if changed is not None:
            changed.set()

    def waiting_on(self, run_id: str) -> anyio.Event | None:
        """An event set when the request or run ``run_id`` ends on this server (None: not here)."""
        return self.requests.get(run_id) or self.runs.get(run_id)

    @contextmanager
    def request(self, run_id: str) -> Iterator[None]:
        """A request with an Idempotency-Key in progress: a repeat that arrives meanwhile waits for it."""
        answered = self.requests[run_id] = anyio.Event()
        try:
            yield
        finally:
            del self.requests[run_id]
            answered.set()

    @contextmanager
    def run(self, run_id: str, log: EventLog | None) -> Iterator[None]:
        """``run_id`` runs here (its events going to ``log``, if it keeps them) until the block ends."""
        ended = self.runs[run_id] = anyio.Event()
        if log is not None:
            self.logs[run_id] = log
        self.notify(run_id)
        try:
            yield
        finally:
            if log is not None and self.logs.get(run_id) is log:
                del self.logs[run_id]
            ended.set()
            del self.runs[run_id]
            self.notify(run_id)
