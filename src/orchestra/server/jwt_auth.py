"""Bearer JWTs (PyJWT, the ``auth`` extra): checked against an issuer's JWKS or static keys, with audience,
issuer, expiry and clock skew, then mapped onto an ``Identity`` by the config's claims.

Each refusal names its rule (``token_expired``, ``wrong_audience``, ``wrong_issuer``, ``unknown_key_id``,
``bad_signature``, ...) and never repeats the token: 401 for a token that is not valid, 403 for a valid
one that names no workspace or user, 503 when the issuer's keys cannot be fetched.
"""

from __future__ import annotations

import re
from typing import Any

from orchestra.hosting.identity import Identity, valid_workspace
from orchestra.hosting.tenant_config import JwtSettings

__all__ = ["AuthRefused", "JwtVerifier", "looks_like_jwt"]


class AuthRefused(Exception):
    """A caller refused: ``status`` (401, 403 or 503), a ``code`` naming the rule, and a message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts: what a JWS in compact form is (an API key is not)."""
    return re.fullmatch(r"[\w-]+\.[\w-]+\.[\w-]*", token) is not None


def _jwt() -> Any:
    try:
        import jwt
    except ImportError:  # pragma: no cover - the extra is installed in CI
        raise ImportError(
            "auth.jwt needs PyJWT: pip install 'orchestra-agents[auth]' (and cryptography for RS/ES keys)"
        ) from None
    return jwt


def _claim(claims: dict[str, Any], path: str) -> Any:
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


class JwtVerifier:
    """Verifies bearer JWTs (see the module docstring). ``identify`` may fetch the JWKS: run it off the
    event loop."""

    def __init__(self, settings: JwtSettings, admin_roles: list[str]) -> None:
        jwt = _jwt()
        self.settings = settings
        self.admin_roles = frozenset(admin_roles)
        self._client = (
            jwt.PyJWKClient(
                settings.jwks_url,
                lifespan=settings.jwks_cache_s,
                cooldown_duration=settings.jwks_refetch_s,
                timeout=10,
            )
            if settings.jwks_url
            else None
        )
        self._static: dict[str | None, Any] = {}
        for key in settings.keys:
            if isinstance(key, dict):
                self._static[key.get("kid")] = jwt.PyJWK(key).key
            else:
                self._static[None] = key

    def _key(self, kid: str | None) -> Any:
        jwt = _jwt()
        shown = kid if kid is None or len(kid) <= 64 else kid[:64] + "..."  # the header's, never the token
        if self._client is not None:
            if kid is None:
                raise AuthRefused(401, "unknown_key_id", "the token names no key id (kid); the issuer's do")
            try:
                return self._client.get_signing_key(kid).key
            except jwt.PyJWKClientConnectionError:
                raise AuthRefused(
                    503, "jwks_unavailable", "the issuer's keys (auth.jwt.jwks_url) could not be fetched"
                ) from None
            except jwt.PyJWKClientError:
                raise AuthRefused(
                    401, "unknown_key_id", f"the token's key id {shown!r} is not one of the issuer's keys"
                ) from None
        if kid in self._static:
            return self._static[kid]
        if None in self._static and len(self._static) == 1:
            return self._static[None]
        raise AuthRefused(401, "unknown_key_id", f"the token's key id {shown!r} is not one of auth.jwt.keys")

    def identify(self, token: str) -> Identity:
        """The identity a token stands for.

        Raises:
            AuthRefused: the token is not valid (401), names no workspace or user (403), or the issuer's
                keys cannot be fetched (503); the code names the rule.
        """
        jwt = _jwt()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise AuthRefused(401, "invalid_token", "the bearer token is not a valid JWT") from None
        if header.get("alg") not in self.settings.algorithms:
            raise AuthRefused(
                401, "wrong_algorithm", f"the token's algorithm is not one of {self.settings.algorithms}"
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise AuthRefused(401, "invalid_token", "the token's key id (kid) is not a string")
        key = self._key(kid)
        s = self.settings
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=s.algorithms,
                audience=s.audience,
                issuer=s.issuer,
                leeway=s.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthRefused(401, "token_expired", "the token has expired (exp); get a new one") from None
        except jwt.InvalidAudienceError:
            raise AuthRefused(
                401, "wrong_audience", f"the token is not for audience {s.audience!r}"
            ) from None
        except jwt.InvalidIssuerError:
            raise AuthRefused(401, "wrong_issuer", f"the token was not issued by {s.issuer!r}") from None
        except jwt.InvalidSignatureError:
            raise AuthRefused(401, "bad_signature", "the token's signature does not verify") from None
        except jwt.ImmatureSignatureError:
            raise AuthRefused(401, "token_not_yet_valid", "the token is not valid yet (nbf or iat)") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthRefused(401, "missing_claim", f"the token has no {exc.claim!r} claim") from None
        except jwt.InvalidTokenError:
            raise AuthRefused(401, "invalid_token", "the bearer token is not a valid JWT") from None
        return self._identity(claims)

    def _identity(self, claims: dict[str, Any]) -> Identity:
        mapping = self.settings.claims
        workspace = self.settings.workspace or _claim(claims, mapping.workspace)
        if not valid_workspace(workspace):
            raise AuthRefused(
                403, "no_workspace", f"the token's {mapping.workspace!r} claim names no valid workspace"
            )
        user = _claim(claims, mapping.user)
        if not isinstance(user, str) or not user:
            raise AuthRefused(403, "no_user", f"the token has no {mapping.user!r} claim naming its user")
        raw = _claim(claims, mapping.roles)
        roles = frozenset(
            raw.split() if isinstance(raw, str) else [str(r) for r in raw] if isinstance(raw, list) else []
        )
        return Identity(workspace, user, roles, sees_workspace=bool(roles & self.admin_roles), via="jwt")
