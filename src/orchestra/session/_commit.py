"""What "stored" means: the one commit point of a save, and the housekeeping after it.

Every save (an agent's turn, a node of a run, the end of an invocation) has exactly one commit point:
its journal record, created with a create-only write (on a database storage, the transaction that
writes it). The rules around it are the promise every error keeps:

- **Before the commit point**, a failure means nothing was stored. The error says so (``stored`` is
  False) and the caller rolls the work back in memory: an agent's failed turn leaves no trace, in memory
  or in storage.
- **At the commit point**, a write whose answer was lost (a timeout, a reset, a 5xx after the request
  was sent, or any exception that is not a ``StorageError``, which a storage users wrote may raise after
  its write took effect) is read back before anyone is told: the record holding our bytes means it was
  stored. If the read fails too, the error says that the outcome is unknown (``stored`` is None) and the
  journal keeps the record it tried: its next save reads it back first, adopts it if it is there, and
  never takes its own record for another writer's.
- **After the commit point**, nothing raises to the caller. Compaction (the ``snapshot_latest.json``
  rewrite and the manifest), folding (``snapshot_base.json`` and deleting old records) and deleting old
  snapshots are housekeeping: a failure is logged as ``session_housekeeping_failed`` and retried by the
  next save or by ``orchestra sessions compact``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from orchestra._logging import get_logger
from orchestra.errors import StorageError
from orchestra.storage import Storage

if TYPE_CHECKING:
    from orchestra.session._layout import ScopeLayout

__all__ = ["housekeeping", "read_back", "write_outcome"]

log = get_logger("orchestra.session")


async def read_back(storage: Storage, key: str, data: bytes) -> bool | None:
    """Whether ``key`` holds exactly ``data`` (True), does not (False), or could not be read (None)."""
    try:
        found = await storage.read(key)
    except Exception:  # a StorageError, or whatever a storage users wrote raises: not known either way
        return None
    return found is not None and found[0] == data


async def write_outcome(
    storage: Storage,
    key: str,
    data: bytes,
    exc: Exception,
    *,
    look: Callable[[], Awaitable[bool | None]] | None = None,
) -> bool | None:
    """Whether a write of ``data`` to ``key`` that raised ``exc`` was made: what a ``StorageError`` says
    when it knows, else read back (by ``look`` where reading the key back is not the way: an append).
    An exception that is not a ``StorageError`` (a storage users wrote may raise
    ``ConnectionResetError`` after its write took effect) says nothing: it is read back too."""
    if isinstance(exc, StorageError) and exc.stored is not None:
        return exc.stored
    stored = await (look() if look is not None else read_back(storage, key, data))
    if not isinstance(exc, StorageError):
        log.warning(
            "storage_raised_unexpected_error",
            key=key,
            error=f"{type(exc).__name__}: {exc}",
            read_back={True: "stored", False: "not stored", None: "unreadable"}[stored],
            hint="a storage should raise orchestra.errors.StorageError (with stored=...)",
        )
    return stored


@contextlib.asynccontextmanager
async def housekeeping(layout: ScopeLayout, what: str) -> AsyncIterator[None]:
    """Run work that comes after the commit point: a failure is logged, never raised (see the module
    docstring). Cancellation still goes through."""
    try:
        yield
    except Exception as exc:
        log.warning(
            "session_housekeeping_failed",
            session_id=layout.session_id,
            scope=f"{layout.kind}/{layout.scope_id}",
            work=what,
            error=f"{type(exc).__name__}: {exc}",
            retried_by="the next save, or orchestra sessions compact",
        )
