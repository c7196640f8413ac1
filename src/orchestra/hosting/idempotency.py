"""Idempotency keys: a request repeated with the same ``Idempotency-Key`` gets the first one's answer.

A key is stored as ``idempotency/<agent_id>/<sha256 of the key>.json`` in the workspace's storage, naming
the run that answers it and a fingerprint of the request. It is created with a create-only write, so of
two servers that get the same key at once exactly one runs the turn; the other reads the key and answers
from that run's record (``orchestra.hosting.admission`` decides: replay, wait, or run again).

A key is honoured for ``runs.idempotency_ttl_s`` (24 hours by default); after that the same key starts a
new run. Keys are small and are not deleted one by one: deleting a workspace's ``idempotency/`` folder
forgets them all.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from orchestra.errors import StorageConflictError
from orchestra.hosting.outcomes import Refused
from orchestra.storage import ABSENT, Storage

__all__ = ["IdempotencyKeys", "KeyEntry", "KeyRefused", "fingerprint", "validate_idempotency_key"]

_MAX_KEY = 255


class KeyRefused(Refused):
    """A repeated request that cannot be answered now: ``status`` and ``code`` say why."""


def validate_idempotency_key(key: str) -> str:
    """1-255 printable ASCII characters (what HTTP headers carry safely), or ``KeyRefused`` (422)."""
    if not 0 < len(key) <= _MAX_KEY or not key.isascii() or not key.isprintable():
        raise KeyRefused(
            422,
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1-{_MAX_KEY} printable ASCII characters (a UUID is a good choice)",
        )
    return key


def fingerprint(body: Any) -> str:
    """What a repeated request must match: a hash of its JSON body."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class KeyEntry:
    """What a stored key says: the run that answers it, and the request it was made for."""

    run_id: str
    fingerprint: str
    created_at: float
    version: str


class IdempotencyKeys:
    """The keys of one workspace (see the module docstring)."""

    def __init__(self, storage: Storage, ttl_s: float) -> None:
        self.storage = storage
        self.ttl_s = ttl_s

    @staticmethod
    def _path(agent_id: str, key: str) -> str:
        return f"idempotency/{agent_id}/{hashlib.sha256(key.encode()).hexdigest()}.json"

    @staticmethod
    def _data(run_id: str, print_: str) -> bytes:
        return json.dumps({"run_id": run_id, "fingerprint": print_, "created_at": time.time()}).encode()

    async def read(self, agent_id: str, key: str) -> KeyEntry | None:
        """The key's entry, or None if it was never used or is older than the TTL."""
        found = await self.storage.read(self._path(agent_id, key))
        return None if found is None else self._fresh(found)

    def _fresh(self, found: tuple[bytes, str]) -> KeyEntry | None:
        raw = json.loads(found[0])
        entry = KeyEntry(str(raw["run_id"]), str(raw["fingerprint"]), float(raw["created_at"]), found[1])
        return entry if time.time() - entry.created_at < self.ttl_s else None

    async def claim(self, agent_id: str, key: str, print_: str, run_id: str) -> KeyEntry | None:
        """Make the key name ``run_id``. None if it does now (this request runs the turn); otherwise the
        entry it already has (checked to be for the same request)."""
        path = self._path(agent_id, key)
        while True:
            # One read decides: the entry (fresh: answered from it; expired: replaced on its version).
            found = await self.storage.read(path)
            entry = None if found is None else self._fresh(found)
            if entry is not None:
                if entry.fingerprint != print_:
                    raise KeyRefused(
                        422,
                        "idempotency_key_reused",
                        "this Idempotency-Key was used for another request (a different body); use a new "
                        "key for each request",
                    )
                return entry
            try:
                await self.storage.write(
                    path, self._data(run_id, print_), expect=found[1] if found is not None else ABSENT
                )
            except StorageConflictError:
                continue  # another request with this key claimed it meanwhile: answer from its run
            return None

    async def forget(self, agent_id: str, key: str) -> None:
        """Drop a key whose request started nothing (it was refused), so that a repeat is run."""
        await self.storage.delete(self._path(agent_id, key))

    async def take_over(self, agent_id: str, key: str, entry: KeyEntry, run_id: str) -> bool:
        """Point the key at ``run_id`` instead of ``entry``'s run (which stored nothing); False if another
        request did so first."""
        try:
            await self.storage.write(
                self._path(agent_id, key), self._data(run_id, entry.fingerprint), expect=entry.version
            )
        except StorageConflictError:
            return False
        return True
