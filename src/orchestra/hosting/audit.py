"""The audit log: who created, deleted, answered, cancelled or resumed what, and when.

Each entry is its own document, ``audit/<UTC day>/<uuid7>.json`` in the workspace's storage, written
create-only (``expect=ABSENT``): an entry is never changed, only deleted whole days at a time once they are
older than ``audit.retention_days``. Entries are listed oldest first (uuid7 ids sort by time).

| action | when |
| --- | --- |
| ``run.create`` | a run is admitted (an invoke, a background run, a door's message) |
| ``interrupt.answer`` | a run answers a session's open interrupts |
| ``run.cancel``, ``run.resume``, ``run.move`` | a run is cancelled, started again, or moved to workers |
| ``session.delete`` | a session is deleted |
| ``schedule.create``, ``schedule.delete`` | a schedule is made or deleted over the API |
| ``schedule.pause``, ``schedule.resume``, ``schedule.run`` | a schedule is paused, resumed, or run now |
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestra.hosting.identity import caller
from orchestra.session import uuid7
from orchestra.storage import ABSENT, Storage

__all__ = ["AuditLog"]


class AuditLog:
    """One workspace's audit log (see the module docstring)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def record(self, action: str, **target: Any) -> None:
        """Append an entry for the current caller: ``action`` on ``target`` (agent, session, run ids)."""
        found = caller()
        now = datetime.now(UTC)
        entry = {
            "at": now.isoformat(),
            "action": action,
            "user": None if found is None else found.user,
            "via": None if found is None else found.via,
            **{k: v for k, v in target.items() if v is not None},
        }
        key = f"audit/{now:%Y-%m-%d}/{uuid7()}.json"
        await self.storage.write(key, json.dumps(entry).encode(), expect=ABSENT)

    async def entries(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        user: str | None = None,
        action: str | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Entries oldest first, filtered by time (``since`` inclusive, ``until`` exclusive), user and
        action, at most ``limit``."""
        days = sorted({key.split("/")[1] for key in await self.storage.list("audit/")})
        found: list[dict[str, Any]] = []
        for day in days:
            if since is not None and day < since.strftime("%Y-%m-%d"):
                continue
            if until is not None and day > until.strftime("%Y-%m-%d"):
                break
            for key in await self.storage.list(f"audit/{day}/"):
                read = await self.storage.read(key)
                if read is None:
                    continue  # pruned meanwhile
                entry = json.loads(read[0])
                at = datetime.fromisoformat(entry["at"])
                if (since is not None and at < since) or (until is not None and at >= until):
                    continue
                if (user is not None and entry.get("user") != user) or (
                    action is not None and entry.get("action") != action
                ):
                    continue
                found.append(entry)
                if len(found) >= limit:
                    return found
        return found

    async def prune(self, retention_days: float, now: float | None = None) -> int:
        """Delete the days wholly older than ``retention_days``; how many days went."""
        cutoff = datetime.fromtimestamp(now if now is not None else time.time(), UTC) - timedelta(
            days=retention_days
        )
        days = sorted({key.split("/")[1] for key in await self.storage.list("audit/")})
        gone = 0
        for day in days:
            end_of_day = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC) + timedelta(days=1)
            if end_of_day > cutoff:
                break
            await self.storage.delete_prefix(f"audit/{day}/")
            gone += 1
        return gone
