"""The server config's sections for many tenants: ``auth:`` (JWTs, a hook, admin roles), ``quotas:`` and
``audit:``. ``config.py`` holds the rest; docs/tenants.md shows them in use.

```yaml
auth:
  admin_roles: [admin]                     # roles that see the whole workspace
  jwt:
    jwks_url: https://login.example.com/.well-known/jwks.json    # or keys: [<a JWK or a PEM public key>]
    issuer: https://login.example.com/
    audience: orchestra
    algorithms: [RS256]
    leeway_s: 30                           # clock skew allowed on exp, nbf and iat
    claims: {workspace: org, user: sub, roles: roles}             # dotted paths reach nested claims
    workspace: acme                        # every token's workspace, instead of a claim
  hook: my_company.auth:identify           # called with the request's headers: an Identity or None
quotas:
  limits:
    - {workspace: acme, per: user, period: day, tokens: 200000, runs: 500}
    - {workspace: acme, period: month, cost_usd: 300}
  prices: {"openai:gpt-4o-mini": {input: 0.15, output: 0.60}}
  requests_per_s: 20                       # per API key or user, on each server
audit: {enabled: true, retention_days: 90}  # who did what (a write per action), kept 90 days
```
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestra.spec.models import ID_PATTERN

__all__ = ["AuditSettings", "AuthSettings", "ClaimMap", "JwtSettings", "Quota", "QuotaSettings"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClaimMap(_Model):
    """Which claims of a token give an identity's workspace, user and roles (dotted paths for nested ones,
    e.g. ``realm_access.roles``)."""

    workspace: str = "workspace"
    user: str = "sub"
    roles: str = "roles"


class JwtSettings(_Model):
    """Bearer JWTs checked against an issuer's keys (a JWKS URL or static keys)."""

    jwks_url: str | None = Field(default=None, description="The issuer's JWKS document (fetched, cached).")
    keys: list[dict[str, Any] | str] = Field(
        default_factory=list, description="Static public keys: JWKs (objects) or PEM strings."
    )
    issuer: str = Field(description="The `iss` every token must carry.")
    audience: str | list[str] = Field(description="The `aud` a token must carry (one of these).")
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"], min_length=1)
    leeway_s: float = Field(default=30.0, ge=0, description="Clock skew allowed on exp, nbf and iat.")
    jwks_cache_s: float = Field(default=300.0, gt=0, description="How long fetched keys are kept.")
    jwks_refetch_s: float = Field(
        default=30.0,
        ge=0,
        description="An unknown key id fetches the JWKS again (a rotated key) at most this often.",
    )
    claims: ClaimMap = Field(default_factory=ClaimMap)
    workspace: str | None = Field(
        default=None, pattern=ID_PATTERN, description="Every token's workspace (instead of a claim)."
    )

    @model_validator(mode="after")
    def _has_keys(self) -> JwtSettings:
        if (self.jwks_url is None) == (not self.keys):
            raise ValueError("give jwks_url or keys (one of them): where the issuer's public keys are")
        return self


class AuthSettings(_Model):
    """Who may call: API keys (``api_keys``, as always), JWTs, and a hook for anything else."""

    admin_roles: list[str] = Field(
        default_factory=lambda: ["admin"], description="Roles that see and act on the whole workspace."
    )
    jwt: JwtSettings | None = None
    hook: str | None = Field(
        default=None,
        pattern=r"^[\w.]+:[\w.]+$",
        description="module:function called with the request's headers; returns an Identity or None.",
    )


Period = Literal["day", "month"]


class Quota(_Model):
    """What a workspace, or each user of it, may spend in a period (UTC days or months)."""

    workspace: str = Field(pattern=ID_PATTERN)
    per: Literal["workspace", "user"] = Field(
        default="workspace", description="One budget for the workspace, or one for each of its users."
    )
    period: Period = "day"
    tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0, description="Priced by the run budgets' price table.")
    model_calls: int | None = Field(default=None, ge=0)
    runs: int | None = Field(default=None, ge=0)


class ModelPrice(_Model):
    """A model's price: US dollars per million input and output tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class QuotaSettings(_Model):
    """Quotas on spend, and a request rate per caller (per API key or user)."""

    limits: list[Quota] = Field(default_factory=list)
    requests_per_s: float | None = Field(
        default=None, gt=0, description="Requests a second per caller (per key or user), on each server."
    )
    burst: int = Field(default=10, ge=1, description="Requests a caller may send at once above the rate.")
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="USD per million input and output tokens by model name ({input:, output:}), as run "
        "budgets' prices; a cost_usd quota refuses a model without one.",
    )


class AuditSettings(_Model):
    """The audit log: who created, deleted, answered, cancelled or resumed what, and when."""

    enabled: bool = Field(default=False, description="Keep it (one storage write per logged action).")
    retention_days: float = Field(default=90, gt=0, description="Records older than this are deleted.")
