"""What a stop keeps of a run, by its mode (the table is ``stops.py``'s): an agent's completed steps
closed with a note (``interrupt``), the run's records taken back out of its session (``rollback``), or
nothing (``cancel``: rolled back like any failure); a turn kept open after a side-effecting tool stays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestra.agent import Agent
from orchestra.errors import SessionConflictError, StorageError
from orchestra.history import history_problems
from orchestra.hosting.stops import StopRequest
from orchestra.messages import MessageDict
from orchestra.multiagent import MultiAgentBase
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session.scopes import discard_run, stored_by

if TYPE_CHECKING:
    from orchestra.hosting.invocation import Invocation
    from orchestra.hosting.records import RunRecord
    from orchestra.storage import Storage

__all__ = ["INTERRUPTED_NOTE", "Stopped", "close_partial_turn", "settle_stop"]

INTERRUPTED_NOTE = "(interrupted by a newer message)"
"""What closes the completed part of a turn stopped by the ``interrupt`` policy: the model sees it."""


@dataclass
class Stopped:
    """A run that a stop request ended before its outcome was decided."""

    request: StopRequest
    partial: list[MessageDict] = field(default_factory=list)  # an agent's turn so far, when it stopped
    status: str = "interrupted"  # or rolled_back
    stored: bool | None = False  # whether any of it is in the session (None: not known)
    note: str | None = None


def close_partial_turn(partial: list[MessageDict]) -> list[MessageDict]:
    """The completed steps of a stopped turn, closed so that the history stays valid: a step whose
    tool calls have no results yet is left out, and an assistant note ends the turn."""
    kept = list(partial)
    if kept and kept[-1]["role"] == "assistant" and any("toolUse" in b for b in kept[-1]["content"]):
        kept.pop()
    if not kept:
        return []
    if kept[-1]["role"] == "user":
        kept.append({"role": "assistant", "content": [{"text": INTERRUPTED_NOTE}]})
    return kept


async def settle_stop(
    outcome: Stopped,
    target: Agent | MultiAgentBase | None,
    invocation: Invocation,
    record: RunRecord,
    storage: Storage,
    compaction: Compaction,
) -> Stopped:
    """Apply a stop the way its mode says (see ``stops.py``); what is in the session afterwards is what
    ``outcome`` says (``stored``)."""
    mode = outcome.request.mode
    outcome.status = "rolled_back" if mode == "rollback" else "interrupted"
    session_id = invocation.session_id
    if invocation.mode != "session" or target is None or session_id is None:
        return outcome
    where = (storage, target, session_id, record.run_id, record.started_at)
    stored = await stored_by(*where)
    # A side-effecting tool of an agent's turn had run: the turn was kept open (and saved) rather than
    # rolled back, so that the effect is never lost nor run twice. It stays, whatever the mode: the
    # session's next request (or POST .../sessions/{sid}/resume) finishes it first.
    if isinstance(target, Agent) and target.open_turn() is not None:
        outcome.status, outcome.stored = "interrupted", True
        outcome.note = (
            "a side-effecting tool of its turn had run, so the turn is kept open, not discarded: the "
            "session's next request finishes it first"
        )
        return outcome
    if mode == "rollback":
        if stored and not await discard_run(*where, compaction):
            outcome.status, outcome.stored = "interrupted", True
            outcome.note = (
                "it could not be rolled back (the session's records before it were folded away); its "
                "completed work is kept"
            )
        return outcome
    if isinstance(target, MultiAgentBase):
        outcome.stored = stored  # saved as interrupted: its completed nodes are kept
        return outcome
    if stored:  # the stop came after the turn was stored: it stands
        outcome.status, outcome.stored = "completed", True
        outcome.note = "the stop came after the turn was stored; it was kept"
        return outcome
    if mode == "interrupt":
        partial = outcome.partial
        if not partial and invocation.task is not None and not invocation.responses:
            # Stopped before its message reached the history: the message is kept all the same.
            partial = [{"role": "user", "content": [{"text": invocation.task}]}]
        kept = close_partial_turn(partial)
        if kept and not history_problems([*target.messages, *kept]):
            target.messages.extend(kept)
            manager = target.session_manager
            assert isinstance(manager, SnapshotSessionManager)
            try:
                await manager.save_snapshot(target)
            except (StorageError, SessionConflictError) as exc:
                del target.messages[-len(kept) :]
                outcome.stored = getattr(exc, "stored", False)
                outcome.note = f"its completed steps could not be stored: {exc}"
                return outcome
            outcome.stored = True
            if kept[-1] is partial[-1] and partial[-1]["role"] == "assistant":
                # The model had given its whole reply when the stop came, before the save: the turn is
                # complete as stored, and is answered so (not as interrupted, with a reply it did give).
                outcome.status = "completed"
                outcome.note = "the stop came after the model's reply; the turn was kept"
    return outcome
