"""Deleting a session so that every writer of it sees the delete before it writes again (``Journal.erase``
for each of its scopes: a tombstone at the next record number, then the data removed)."""

from __future__ import annotations

from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout, session_prefix
from orchestra.storage import Storage

__all__ = ["erase_session"]


async def erase_session(storage: Storage, session_id: str) -> int:
    """Delete every scope of a session (snapshot layout); returns how many files held it (0: none did,
    or it was deleted before). Its tombstones stay, a few bytes per record the journal held, until the
    session is written again (its records are folded away like any others) or pruned."""
    prefix = f"{session_prefix(session_id)}scopes/"
    scopes = sorted({tuple(key[len(prefix) :].split("/")[:2]) for key in await storage.list(prefix)})
    count = 0
    for kind, scope_id in (scope for scope in scopes if len(scope) == 2):
        if kind in ("agent", "multiAgent"):
            count += await Journal(storage, ScopeLayout(session_id, kind, scope_id)).erase()  # type: ignore[arg-type]
    return count
