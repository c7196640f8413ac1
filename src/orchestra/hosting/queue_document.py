"""A session's busy document as stored: one line per change, appended where the storage can append.

``SessionQueues`` (``session_queue.py``) changes a session's document twice a turn (its claim and its
release). A document replaced whole costs a new file on local files, and a file written without fsync
over an existing name makes ext4 push its data to the disk before the rename (``auto_da_alloc``): about
1 ms under the folder's lock, where every session of the agent takes its turn. So where the storage offers
appends (``AppendStorage``: local files), a change is appended as one more line, on the condition that the
document is still as this server last saw it (its length, and its last line at its end): the
compare-and-swap of a write, at the cost of an append. The state is the last line. Once the document
would pass ``COMPACT_AT`` bytes, the change is written whole instead (a compare-and-swap over the version
just read), which starts it again at one line. Elsewhere every change is written whole.

A power cut may leave the end of a document written without fsync torn or zeroed: its state is then its
last whole line that reads (or an idle session, when none does, whose queued runs a sweep queues again),
and its next change is written whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestra.errors import StorageConflictError
from orchestra.storage import ABSENT, Storage, appendable

__all__ = ["COMPACT_AT", "Holder", "QueueState", "Stored", "parse", "store"]

COMPACT_AT = 32 * 1024  # bytes: about 150 changes (a line is 150-250 bytes with an empty queue)


@dataclass(frozen=True)
class Holder:
    """A run that has a session or waits for it, and the server responsible for it."""

    run_id: str
    server: str
    background: bool = False  # its record can be run by any server (every queued run's can)


@dataclass
class QueueState:
    active: Holder | None = None
    queue: list[Holder] = field(default_factory=list)
    last: str | None = None  # the server of the run that had the session before the active one

    def to_json(self) -> bytes:
        def plain(holder: Holder) -> dict[str, Any]:
            return {"run_id": holder.run_id, "server": holder.server, "background": holder.background}

        return json.dumps(
            {
                "active": plain(self.active) if self.active else None,
                "queue": [plain(h) for h in self.queue],
                "last": self.last,
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> QueueState:
        raw = json.loads(data)
        active = raw.get("active")
        queue = [Holder(**item) for item in raw.get("queue", [])]
        return cls(Holder(**active) if active else None, queue, raw.get("last"))

    def handed(self, holder: Holder | None, queue: list[Holder]) -> QueueState:
        """The state once the active run has handed the session to ``holder`` (None: idle), ``queue``
        waiting."""
        return QueueState(holder, queue, self.active.server if self.active else self.last)


@dataclass(frozen=True)
class Stored:
    """A document as this server last read or wrote it: ``length`` bytes (0: absent or empty), its
    storage version (None when absent, or unknown after an append), and its last line when an append may
    follow it (empty when it cannot: a document not ended by a whole line is written whole)."""

    length: int = 0
    version: str | None = None
    last_line: bytes = b""

    def takes(self, line: bytes) -> bool:
        """Whether ``line`` may be appended to it (else the change is written whole)."""
        return (self.length == 0 or bool(self.last_line)) and self.length + len(line) <= COMPACT_AT


def parse(data: bytes, version: str) -> tuple[QueueState, Stored]:
    """A stored document's state (its last line) and where it stands (see the module docstring)."""
    *lines, rest = data.split(b"\n")
    if not rest and lines:
        state = _state(lines[-1])
        if state is not None:
            return state, Stored(len(data), version, lines[-1] + b"\n")
    for line in reversed([*lines, rest]):  # a torn or zeroed end (a power cut), or an older whole document
        state = _state(line)
        if state is not None:
            return state, Stored(len(data), version)
    return QueueState(), Stored(len(data), version)


def _state(line: bytes) -> QueueState | None:
    if not line.strip():
        return None
    try:
        return QueueState.from_json(line)
    except (ValueError, TypeError):
        return None


async def store(storage: Storage, key: str, stored: Stored, state: QueueState) -> Stored:
    """Change the document from ``stored`` to ``state``: appended where it can be, else written whole
    over ``stored.version`` (after an append, the version is read first, on the append's condition).

    Raises:
        StorageConflictError: the document is no longer as ``stored`` says.
    """
    line = state.to_json() + b"\n"
    appender = appendable(storage)
    if appender is not None and stored.takes(line):
        length = await appender.append(key, line, at=stored.length, tail=stored.last_line)
        return Stored(length, None, line)
    version = stored.version
    if version is None and stored.length:
        found = await storage.read(key)
        if found is None or len(found[0]) != stored.length or not found[0].endswith(stored.last_line):
            raise StorageConflictError(f"cannot update {key!r}: it changed since it was read")
        version = found[1]
    return Stored(len(line), await storage.write(key, line, expect=version or ABSENT), line)
