"""A session's event inbox: events sent to a run, kept until a wait takes each, delivered exactly once.

One JSON document per session holds the events sent (``events``: name, payload, key, when) and which
wait took which (``taken``: ``{interrupt_id: event key, or None for a timeout}``). Every change is one
compare-and-swap of that document, so across any number of processes on one storage:

- an event is stored once per key (``send`` with a key already there is a duplicate, not a second event);
- a wait takes the oldest event of its name that no wait took, or, once its deadline passed and none
  came, a timeout; that choice is written once and every later ``answer`` for the wait repeats it, so
  whoever wakes the run (any server, any number of times) answers it the same way;
- an event sent before any wait for it is kept until one takes it.

The document keeps every event and choice (a session's events are few); deleting the session's inbox
key forgets them.
"""

from __future__ import annotations

import json
from typing import Any

from orchestra.errors import ConfigurationError, StorageConflictError
from orchestra.storage import ABSENT, Storage
from orchestra.waits import Wait, answers_due, event_answer, now

__all__ = ["EventInbox", "EventKeyReused", "answers_for", "decide", "empty", "keep", "session_inbox"]


class EventKeyReused(ConfigurationError):
    """An event key sent again with another name or payload (a key names one event)."""


def empty() -> dict[str, Any]:
    """An inbox document with no event."""
    return {"events": [], "taken": {}}


def keep(document: dict[str, Any], name: str, payload: Any, key: str, at: float) -> bool:
    """Add an event to an inbox document; False if its key is there already (nothing changed).

    Raises:
        EventKeyReused: the key names another event (another name or payload).
    """
    for event in document["events"]:
        if event["key"] == key:
            if event["name"] != name or event["payload"] != payload:
                raise EventKeyReused(
                    f"event key {key!r} was used for another event ({event['name']!r}); use a new key for "
                    "each event"
                )
            return False
    document["events"].append({"key": key, "name": name, "payload": payload, "at": at})
    return True


def decide(document: dict[str, Any], wait: Wait, at: float) -> tuple[dict[str, Any] | None, bool]:
    """An event wait's answer from an inbox document (see the module docstring), and whether deciding it
    changed the document (the choice is recorded in ``taken``). Pure: the caller stores the document."""
    assert wait.kind == "event"
    taken: dict[str, str | None] = document["taken"]
    if wait.interrupt_id in taken:
        return _answer(document, wait, taken[wait.interrupt_id]), False
    used = {key for key in taken.values() if key is not None}
    choice = next(
        (e["key"] for e in document["events"] if e["name"] == wait.event and e["key"] not in used), None
    )
    if choice is None and (wait.deadline is None or wait.deadline > at):
        return None, False
    taken[wait.interrupt_id] = choice
    return _answer(document, wait, choice), True


def _answer(document: dict[str, Any], wait: Wait, key: str | None) -> dict[str, Any]:
    if key is None:
        return event_answer(wait, timed_out=True)
    event = next(e for e in document["events"] if e["key"] == key)
    return event_answer(wait, event["payload"])


class EventInbox:
    """The inbox document at ``key`` in ``storage`` (see the module docstring)."""

    def __init__(self, storage: Storage, key: str) -> None:
        self.storage = storage
        self.key = key

    async def _read(self) -> tuple[dict[str, Any], Any]:
        found = await self.storage.read(self.key)
        if found is None:
            return empty(), ABSENT
        return json.loads(found[0]), found[1]

    async def _write(self, document: dict[str, Any], version: Any) -> bool:
        try:
            await self.storage.write(self.key, json.dumps(document).encode(), expect=version)
        except StorageConflictError:
            return False  # changed meanwhile: read it again and decide again
        return True

    async def send(self, name: str, payload: Any, key: str) -> bool:
        """Keep an event until a wait takes it; False if an event with this key is already kept.

        Raises:
            EventKeyReused: the key names another event (another name or payload).
        """
        json.dumps(payload)  # refuse what cannot be stored before anything is
        while True:
            document, version = await self._read()
            if not keep(document, name, payload, key, now()):
                return False
            if await self._write(document, version):
                return True

    async def answer(self, wait: Wait, at: float | None = None) -> dict[str, Any] | None:
        """The answer of an event wait, decided once: the event it took, a timeout once its deadline
        passed, or None while neither (nothing is written then)."""
        at = now() if at is None else at
        while True:
            document, version = await self._read()
            decided, changed = decide(document, wait, at)
            if not changed or await self._write(document, version):
                return decided

    async def may_answer(self, interrupt_ids: list[str]) -> bool:
        """Whether an event wait among ``interrupt_ids`` may end now without its deadline: an event no
        wait took is here, or the answer of one of them was decided already (and may not be delivered
        yet: whoever delivered it asks again and gets the same answer). One read."""
        document, _ = await self._read()
        taken = document["taken"]
        if any(interrupt_id in taken for interrupt_id in interrupt_ids):
            return True
        used = set(taken.values())
        return any(e["key"] not in used for e in document["events"])

    async def pending(self) -> list[dict[str, Any]]:
        """The events no wait took yet, oldest first."""
        document, _ = await self._read()
        used = set(document["taken"].values())
        return [e for e in document["events"] if e["key"] not in used]


def session_inbox(storage: Storage, session_id: str) -> EventInbox:
    """The inbox of a session run outside a server (``orchestra run``, Python): ``inbox/<session>.json``."""
    return EventInbox(storage, f"inbox/{session_id}.json")


async def answers_for(waits: list[Wait], inbox: EventInbox | None, at: float | None = None) -> dict[str, Any]:
    """``{interrupt_id: answer}`` for the waits that can end now: timers whose time passed, event waits
    whose event is in ``inbox`` or whose deadline passed (decided once, in the inbox)."""
    at = now() if at is None else at
    answers = answers_due([w for w in waits if w.kind == "timer" or inbox is None], at)
    for wait in waits:
        if wait.kind == "event" and inbox is not None:
            answer = await inbox.answer(wait, at)
            if answer is not None:
                answers[wait.interrupt_id] = answer
    return answers
