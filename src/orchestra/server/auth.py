"""API keys: stored as SHA-256 hashes, compared in constant time; each key belongs to a workspace."""

from __future__ import annotations

import hashlib
import hmac

from orchestra.server.config import ApiKey

__all__ = ["KeyRing", "hash_key"]


def hash_key(key: str) -> str:
    """The hex SHA-256 of an API key, as the server config stores it (``orchestra hash-key KEY``)."""
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """Finds the workspace of a presented key without revealing, by timing, which key nearly matched."""

    def __init__(self, keys: list[ApiKey]) -> None:
        self._keys = [(bytes.fromhex(k.sha256), k.workspace) for k in keys]

    def workspace_of(self, key: str | None) -> str | None:
        if not key:
            return None
        digest = hashlib.sha256(key.encode()).digest()
        found = None
        for (
            stored,
            workspace,
        ) in self._keys:  # compare with every key: the time does not depend on which matched
            if hmac.compare_digest(digest, stored):
                found = workspace
        return found
