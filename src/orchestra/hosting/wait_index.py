"""Where a server keeps its waiting runs and their sessions' events (``timers.py`` says how they are used):
an entry ``waits/<agent>/<session>/<run_id>`` per run that ended waiting, and an event inbox
``inbox/<agent>/<session>.json`` per session."""

from __future__ import annotations

from orchestra._logging import get_logger
from orchestra.errors import OrchestraError
from orchestra.hosting.records import RunRecord
from orchestra.inbox import EventInbox
from orchestra.storage import Storage
from orchestra.waits import open_waits

__all__ = ["entry_key", "inbox_of", "note_waiting"]

log = get_logger("orchestra.server")


def entry_key(agent_id: str, session_id: str, run_id: str) -> str:
    return f"waits/{agent_id}/{session_id}/{run_id}"


def inbox_of(storage: Storage, agent_id: str, session_id: str) -> EventInbox:
    """A hosted session's event inbox."""
    return EventInbox(storage, f"inbox/{agent_id}/{session_id}.json")


async def note_waiting(storage: Storage, record: RunRecord) -> None:
    """Write the entry of a run that ends waiting (durably, before its final record)."""
    if record.session_id is None or record.status != "interrupted" or not open_waits(record.interrupts):
        return
    record.waiting = [w.summary() for w in open_waits(record.interrupts)]
    try:
        await storage.write(entry_key(record.agent_id, record.session_id, record.run_id), b"")
    except (OrchestraError, OSError) as exc:  # the turn is stored: say so, and answer as it ended
        log.error("wait_not_noted", run_id=record.run_id, error=f"{type(exc).__name__}: {exc}")
