"""API keys: stored as SHA-256 hashes, compared in constant time; each key belongs to a workspace."""

from __future__ import annotations

import hashlib
import hmac
import os
import time

from orchestra.hosting.config import ApiKey

__all__ = ["SESSION_SECRET_ENV_VAR", "KeyRing", "SessionTokens", "hash_key"]

SESSION_SECRET_ENV_VAR = "ORCHESTRA_SESSION_SECRET"


def hash_key(key: str) -> str:
    """The hex SHA-256 of an API key, as the server config stores it (``orchestra hash-key KEY``)."""
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """Finds the workspace of a presented key without revealing, by timing, which key nearly matched."""

    def __init__(self, keys: list[ApiKey]) -> None:
        self._keys = [(bytes.fromhex(k.sha256), k.workspace) for k in keys]

    def key_id_of(self, key: str) -> str:
        """A short id of a key (the start of its hash): what a dashboard token names, never the key."""
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def has_key_id(self, workspace: str, key_id: str) -> bool:
        """Whether a key of ``workspace`` with this id is still configured (revoking it logs out)."""
        return any(ws == workspace and stored.hex()[:16] == key_id for stored, ws in self._keys)

    def secret(self) -> bytes:
        """The dashboard tokens' signing secret: ``ORCHESTRA_SESSION_SECRET`` if set (set it in
        production), else derived from the configured keys, the same in every worker process."""
        configured = os.environ.get(SESSION_SECRET_ENV_VAR)
        if configured:
            return hashlib.sha256(configured.encode()).digest()
        material = b"".join(sorted(stored for stored, _ in self._keys))
        return hashlib.sha256(b"orchestra-dashboard-session\0" + material).digest()

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


class SessionTokens:
    """Dashboard login tokens: ``<workspace>:<key id>:<expiry>:<signature>`` (HMAC-SHA256).

    The cookie holds a token, never the key: a stolen cookie expires, and revoking the key that logged
    in (removing it from the config) ends its sessions.
    """

    def __init__(self, keys: KeyRing, lifetime_seconds: int = 12 * 3600) -> None:
        self._keys = keys
        self._secret = keys.secret()
        self.lifetime_seconds = lifetime_seconds

    def _sign(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()

    def issue(self, workspace: str, key: str) -> str:
        payload = f"{workspace}:{self._keys.key_id_of(key)}:{int(time.time()) + self.lifetime_seconds}"
        return f"{payload}:{self._sign(payload)}"

    def logout_token(self, session_token: str) -> str:
        """The CSRF token of the logout form: bound to the session, unreadable to other sites."""
        return self._sign(f"logout:{session_token}")

    def form_token(self, session_token: str) -> str:
        """The CSRF token of the dashboard's run forms (answer, cancel, resume): bound to the session."""
        return self._sign(f"form:{session_token}")

    def workspace_of(self, token: str | None) -> str | None:
        if not token or token.count(":") != 3:
            return None
        payload, _, signature = token.rpartition(":")
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        workspace, key_id, expiry = payload.split(":")
        if not expiry.isdigit() or int(expiry) < time.time():
            return None
        return workspace if self._keys.has_key_id(workspace, key_id) else None
