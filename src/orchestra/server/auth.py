"""Who calls: API keys (stored as SHA-256 hashes, compared in constant time; each belongs to a workspace),
bearer JWTs (``jwt_auth.py``) and a hook, each giving an ``Identity``; ``Authenticator.identify`` is the
one function every door asks.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from orchestra.hosting.config import ApiKey, ServerConfig
from orchestra.hosting.identity import Identity, acting_as, identity_hook
from orchestra.server.jwt_auth import AuthRefused, JwtVerifier, looks_like_jwt

__all__ = [
    "SESSION_SECRET_ENV_VAR",
    "AuthRefused",
    "Authenticator",
    "Identity",
    "KeyRing",
    "SessionTokens",
    "hash_key",
]

SESSION_SECRET_ENV_VAR = "ORCHESTRA_SESSION_SECRET"


def hash_key(key: str) -> str:
    """The hex SHA-256 of an API key, as the server config stores it (``orchestra hash-key KEY``)."""
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """Finds the workspace of a presented key without revealing, by timing, which key nearly matched."""

    def __init__(self, keys: list[ApiKey], admin_roles: list[str] | None = None) -> None:
        self._keys = [(bytes.fromhex(k.sha256), k.workspace) for k in keys]
        admins = frozenset(["admin"] if admin_roles is None else admin_roles)
        self._identities = [_key_identity(k, admins) for k in keys]

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
        found = self.identity_of(key)
        return None if found is None else found.workspace

    def identity_of(self, key: str | None) -> Identity | None:
        """The identity of a presented key (None: no such key)."""
        if not key:
            return None
        digest = hashlib.sha256(key.encode()).digest()
        found = None
        for index, (stored, _) in enumerate(self._keys):
            # Compare with every key: the time does not depend on which matched.
            if hmac.compare_digest(digest, stored):
                found = self._identities[index]
        return found

    def identity_of_key_id(self, workspace: str, key_id: str) -> Identity | None:
        """The identity of the configured key with this id (what a dashboard token names)."""
        for (stored, ws), identity in zip(self._keys, self._identities, strict=True):
            if ws == workspace and stored.hex()[:16] == key_id:
                return identity
        return None


def _key_identity(key: ApiKey, admin_roles: frozenset[str]) -> Identity:
    """An API key's identity: its workspace, a user named for the key, and its roles. A key without
    ``roles`` sees the whole workspace, as every key did before identities."""
    user = key.user or key.name or f"key:{key.sha256[:12]}"
    roles = frozenset(key.roles or ())
    sees = key.roles is None or bool(roles & admin_roles)
    return Identity(key.workspace, user, roles, sees_workspace=sees, via="api_key")


class Authenticator:
    """The caller of a request, from its headers: an API key, else a JWT (``auth.jwt``), else the hook
    (``auth.hook``). ``identify`` is what every door asks (routes through ``Caller``/``Workspace``, the
    dashboard through its login, MCP, A2A and AG-UI through ``protocols/_common.py``)."""

    def __init__(self, config: ServerConfig) -> None:
        self.keys = KeyRing(config.api_keys, config.auth.admin_roles)
        self.admin_roles = frozenset(config.auth.admin_roles)
        self.jwt = JwtVerifier(config.auth.jwt, config.auth.admin_roles) if config.auth.jwt else None
        self.hook: Callable[[Mapping[str, str]], Any] | None = (
            identity_hook(config.auth.hook) if config.auth.hook else None
        )
        quotas = config.quotas
        self.rate = RateLimit(quotas.requests_per_s, quotas.burst) if quotas.requests_per_s else None

    async def identify(self, headers: Mapping[str, str], *, act: bool = True) -> Identity:
        """The caller, made the request's caller (``acting_as``) unless ``act`` is false.

        Raises:
            AuthRefused: no valid credentials (401; the code names the rule), a valid token that names no
                workspace (403), the issuer's keys unreachable (503). The token is never repeated.
        """
        header = headers.get("authorization") or ""
        scheme, _, token = header.partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        found = self.keys.identity_of(token)
        if found is None and token and self.jwt is not None and looks_like_jwt(token):
            found = await anyio.to_thread.run_sync(self.jwt.identify, token)
        if found is None and self.hook is not None:
            answer = self.hook(headers)
            found = await answer if inspect.isawaitable(answer) else answer
            if found is not None and not isinstance(found, Identity):
                raise TypeError(f"auth.hook returned {type(found).__name__}, not an Identity or None")
        if found is None:
            message = (
                "a valid API key is required: Authorization: Bearer <key>"
                if header
                else "missing Authorization: Bearer <key>"
            )
            raise AuthRefused(401, "unauthorized", message)
        if self.rate is not None:
            self.rate.take(found)
        if act:
            acting_as(found)
        return found


class RateLimit:
    """Requests a second per caller (an API key's user, a token's subject), on this server: a token
    bucket each, ``burst`` deep. Past it: 429 ``rate_limited`` with the seconds to wait."""

    def __init__(self, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}

    def take(self, identity: Identity) -> None:
        now = time.monotonic()
        key = (identity.workspace, identity.user)
        tokens, then = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.per_s)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            wait = (1 - tokens) / self.per_s
            raise AuthRefused(
                429, "rate_limited", f"over {self.per_s:g} requests a second: retry in {wait:.2f} s"
            )
        if len(self._buckets) > 100_000:  # callers come and go: forget the full buckets
            self._buckets = {k: v for k, v in self._buckets.items() if v[0] < self.burst}
        self._buckets[key] = (tokens - 1, now)


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
        found = self.identity_of(token)
        return None if found is None else found.workspace

    def identity_of(self, token: str | None) -> Identity | None:
        """The identity of the key that logged in (None: no valid token, or its key was removed)."""
        if not token or token.count(":") != 3:
            return None
        payload, _, signature = token.rpartition(":")
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        workspace, key_id, expiry = payload.split(":")
        if not expiry.isdigit() or int(expiry) < time.time():
            return None
        return self._keys.identity_of_key_id(workspace, key_id)
