"""Who is running a session right now: a lock a run holds for its whole life (on local files).

``orchestra run`` and ``orchestra resume`` take it before any work, so a second run of a session whose
first run is still alive is refused at once, instead of at its first save after re-running a node the
first run is running (a paid model call, twice). The lock is an ``flock`` on
``<root>/.writers/<session>.lock``: the kernel releases it when the process dies, so a lock file whose
lock is free is the trace of a run that was killed. Other storages have no such lock; there the second
writer is refused at its first save (``SessionConflictError``), as always.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestra._ids import validate_id
from orchestra.errors import SessionConflictError
from orchestra.storage import LocalFileStorage

__all__ = ["WriterLock", "WriterState"]


@dataclass(frozen=True)
class WriterState:
    """What the lock file says: whether its run is alive, its process and when it started."""

    alive: bool
    pid: int | None
    host: str | None
    started_at: str | None


def _path(storage: Any, session_id: str) -> Path | None:
    if not isinstance(storage, LocalFileStorage):
        return None
    return storage.root / ".writers" / f"{validate_id(session_id, 'session_id')}.lock"


class WriterLock:
    """Held by one run of a session (a no-op on storages other than local files)."""

    def __init__(self, storage: Any, session_id: str) -> None:
        self.session_id = session_id
        self.path = _path(storage, session_id)
        self._fd: int | None = None

    def __enter__(self) -> WriterLock:
        if self.path is None:
            return self
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise SessionConflictError(
                f"session {self.session_id!r} is being run by process {holder.pid} on {holder.host} "
                f"(since {holder.started_at}); nothing was done. Wait for that run to end (or stop it, "
                "then resume): two runs of one session would run the same nodes twice"
            ) from None
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": datetime.now(UTC).isoformat()}
        os.write(fd, json.dumps(info).encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is None or self.path is None:
            return
        # A run that ends (even by an error or Ctrl-C) removes its trace; only a killed one leaves it.
        self.path.unlink(missing_ok=True)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    @staticmethod
    def inspect(storage: Any, session_id: str) -> WriterState | None:
        """The state of a session's writer lock, or None when there is none (or the storage has none)."""
        path = _path(storage, session_id)
        if path is None:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        try:
            info = _read(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return info
            fcntl.flock(fd, fcntl.LOCK_UN)
            return WriterState(False, info.pid, info.host, info.started_at)
        finally:
            os.close(fd)


def _read(fd: int) -> WriterState:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        info = json.loads(os.read(fd, 4096) or b"{}")
    except json.JSONDecodeError:
        info = {}
    return WriterState(True, info.get("pid"), info.get("host"), info.get("started_at"))
