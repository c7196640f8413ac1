"""Who owns each session: ``owners/<agent_id>/<session_id>.json`` in the workspace's storage, created once
(create-only: of two users racing for a new session id, on any servers, one wins), plus a marker
``owned/<user hash>/<agent_id>/<session_id>`` that lists a user's sessions without reading every owner.

A run records its owner in its record (``RunRecord.owner``); its events, interrupts and stops follow the
run or the session. The rules (who sees what) are ``identity.py``'s; this module keeps the records and
answers, for the current caller, whether a session is its to use. Only callers that do not see their
whole workspace cost a read here: a workspace-wide caller claims a new session once and is never refused.
"""

from __future__ import annotations

import hashlib
import json
import time

from orchestra.errors import StorageConflictError
from orchestra.hosting.identity import caller
from orchestra.storage import ABSENT, Storage

__all__ = ["SessionOwners", "user_key"]


def user_key(user: str) -> str:
    """A user's name as a storage key part (subjects may hold any character)."""
    return hashlib.sha256(user.encode()).hexdigest()[:32]


class SessionOwners:
    """The owners of one workspace's sessions (see the module docstring)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @staticmethod
    def _key(agent_id: str, session_id: str) -> str:
        return f"owners/{agent_id}/{session_id}.json"

    async def owner_of(self, agent_id: str, session_id: str) -> str | None:
        found = await self.storage.read(self._key(agent_id, session_id))
        if found is None:
            return None
        owner: str | None = json.loads(found[0]).get("user")
        return owner

    async def may_use(self, agent_id: str, session_id: str, *, create: bool) -> bool:
        """Whether the current caller may use this session; with ``create``, a session nobody owns becomes
        the caller's (a new session, or one made before owners were recorded)."""
        found = caller()
        if found is None:
            return True
        owner = await self.owner_of(agent_id, session_id)
        if owner is None and create:
            owner = await self._claim(agent_id, session_id, found.user)
        if found.sees_workspace:
            return True
        return owner == found.user

    async def claim(self, agent_id: str, session_id: str, user: str) -> str | None:
        """Make a session nobody owns ``user``'s; its owner (``user``, or whoever had it first)."""
        return await self.owner_of(agent_id, session_id) or await self._claim(agent_id, session_id, user)

    async def _claim(self, agent_id: str, session_id: str, user: str) -> str | None:
        body = json.dumps({"user": user, "created_at": time.time()}).encode()
        try:
            await self.storage.write(self._key(agent_id, session_id), body, expect=ABSENT)
        except StorageConflictError:  # another request claimed it first: its owner decides
            return await self.owner_of(agent_id, session_id)
        await self.storage.write(f"owned/{user_key(user)}/{agent_id}/{session_id}", b"")
        return user

    async def owned(self, agent_id: str, user: str) -> set[str]:
        """The session ids of ``agent_id`` that ``user`` owns."""
        prefix = f"owned/{user_key(user)}/{agent_id}/"
        return {key[len(prefix) :] for key in await self.storage.list(prefix)}

    async def forget(self, agent_id: str, session_id: str) -> None:
        """Drop a deleted session's owner (its id may be used again, by anyone)."""
        owner = await self.owner_of(agent_id, session_id)
        if owner is not None:
            await self.storage.delete(f"owned/{user_key(owner)}/{agent_id}/{session_id}")
        await self.storage.delete(self._key(agent_id, session_id))
