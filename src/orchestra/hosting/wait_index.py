"""Where a server keeps its waiting runs and their sessions' events (``timers.py`` says how they are used):
an entry ``waits/<agent>/<session>/<run_id>`` per run that ended waiting, and an event inbox
``inbox/<agent>/<session>.json`` per session."""

from __future__ import annotations

import json

from orchestra._logging import get_logger
from orchestra.errors import OrchestraError
from orchestra.hosting.records import RunRecord
from orchestra.inbox import EventInbox
from orchestra.storage import Storage
from orchestra.waits import now, open_waits

__all__ = ["due_or_events", "entry_key", "forget_session", "inbox_of", "note_again", "note_waiting"]

log = get_logger("orchestra.server")


def entry_key(agent_id: str, session_id: str, run_id: str) -> str:
    return f"waits/{agent_id}/{session_id}/{run_id}"


def inbox_of(storage: Storage, agent_id: str, session_id: str) -> EventInbox:
    """A hosted session's event inbox."""
    return EventInbox(storage, f"inbox/{agent_id}/{session_id}.json")


async def forget_session(storage: Storage, agent_id: str, session_id: str) -> None:
    """Delete a deleted session's wait entries and its event inbox: no sweep wakes a run of it."""
    await storage.delete_prefix(f"waits/{agent_id}/{session_id}/")
    await storage.delete(f"inbox/{agent_id}/{session_id}.json")


async def note_waiting(storage: Storage, record: RunRecord) -> None:
    """Write the entry of a run that ends waiting (durably, before its final record)."""
    if record.session_id is None or record.status != "interrupted" or not open_waits(record.interrupts):
        return
    waits = open_waits(record.interrupts)
    record.waiting = [w.summary() for w in waits]
    # What a sweep reads first: when the first wait ends by itself, and which waits an event may end.
    dues = [w.due for w in waits if w.due is not None]
    events = [w.interrupt_id for w in waits if w.kind == "event"]
    entry = {"due": min(dues) if dues else None, "events": events}
    key, data = entry_key(record.agent_id, record.session_id, record.run_id), json.dumps(entry).encode()
    try:
        await storage.write(key, data)
    except (OrchestraError, OSError) as exc:  # the turn is stored: answer as it ended; a sweep writes it
        log.warning("wait_not_noted_yet", run_id=record.run_id, error=f"{type(exc).__name__}: {exc}")
        _unnoted.append((storage, key, data))


# Entries whose write failed, written again by this server's next sweep (``note_again``). A server that
# stops first leaves them unwritten: the run is then found as a plain invoke killed there is
# (docs/waiting.md, "What a kill does").
_unnoted: list[tuple[Storage, str, bytes]] = []


async def note_again() -> None:
    """Write the entries whose write failed (each stays queued until its write succeeds)."""
    for item in list(_unnoted):
        storage, key, data = item
        try:
            await storage.write(key, data)
        except (OrchestraError, OSError):
            continue
        _unnoted.remove(item)


async def due_or_events(storage: Storage, key: str, inbox: EventInbox) -> bool:
    """Whether an entry's run may have a wait that can end now: its first wait is due, or it waits for an
    event and its session's inbox holds one no wait took, or already decided one of its waits (the inbox
    took an event for it, but the wake that delivers it failed: look again). An entry that cannot be
    read: look."""
    found = await storage.read(key)
    if found is None:
        return False
    try:
        entry = json.loads(found[0])
    except ValueError:
        return True
    if entry.get("due") is not None and entry["due"] <= now():
        return True
    events = entry.get("events")
    if not events:
        return False
    if events is True:  # an entry written before its waits were named: only an untaken event tells
        return bool(await inbox.pending())
    return await inbox.may_answer(events)
