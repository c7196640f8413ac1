"""Quotas: what a workspace, or each of its users, may spend per UTC day or month (tokens, cost, model
calls, runs), held across every server on one storage.

**Counters.** One document per quota scope and period, ``quota/<scope>/<period>.json`` in the workspace's
storage: ``{tokens, cost_usd, model_calls, runs, charges}``. A charge is a read, then a conditional write
from the version read (``expect=version``); a writer that lost the race reads again and retries. Each
charge carries an id kept in the document (the last ``KEPT_CHARGES``), so a write whose answer was lost
and that is tried again is not counted twice.

**Checks.** A run is admitted (``admit``) only while every quota that applies to its caller is below its
limit, and counts one run. Each model call is checked before it starts (``BeforeModelCall``) and charged
when it ends (``AfterModelCall``), through hooks on the run's agents.

**The bound.** A call is checked before it runs and charged after it, so calls that were admitted while
the counter was under the limit may all end after it: spend passes a quota by at most the spend of the
model calls in flight at that moment, on every server together (N concurrent calls of at most T tokens:
N x T tokens). ``model_calls`` and ``runs`` pass theirs by at most the calls or runs admitted at once.

**Refusals.** A spent quota refuses a new run with 429 ``quota_exceeded``, ``Retry-After`` (seconds to the
period's end) and a message naming the quota and when it resets. A run that meets a spent quota between
model calls stops as a budget stop does (``BudgetExceededError``): a pipeline is saved interrupted with
the reason, an agent's turn is rolled back.
"""

from __future__ import annotations

import contextvars
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestra.budget import Budget, Price
from orchestra.errors import BudgetExceededError, StorageConflictError, StorageOutcomeUnknownError
from orchestra.hooks import AfterModelCall, BeforeModelCall
from orchestra.hosting.outcomes import Refused
from orchestra.hosting.ownership import user_key
from orchestra.hosting.tenant_config import Quota, QuotaSettings
from orchestra.storage import ABSENT, Storage

__all__ = ["KEPT_CHARGES", "QuotaExceeded", "Quotas", "Usage", "period_of"]

KEPT_CHARGES = 256
"""Charge ids a counter keeps: a retried write within the last this-many charges is not counted twice."""

LIMITS = ("tokens", "cost_usd", "model_calls", "runs")


def period_of(period: str, now: datetime) -> tuple[str, datetime]:
    """The id of the UTC day or month ``now`` is in, and when it ends."""
    if period == "day":
        start = datetime(now.year, now.month, now.day, tzinfo=UTC)
        return start.strftime("%Y-%m-%d"), datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=UTC)
    nxt = datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC)
    return now.strftime("%Y-%m"), nxt


class QuotaExceeded(Refused):
    """A spent quota (429): which one, and when it resets (``Retry-After``)."""

    def __init__(self, name: str, limit: str, allowed: float, resets: datetime, now: datetime) -> None:
        super().__init__(
            429,
            "quota_exceeded",
            f"quota {name} is spent ({limit} {allowed:g} a period); it resets at {resets.isoformat()}",
            retry_after=max(1.0, (resets - now).total_seconds()),
        )
        self.quota, self.limit, self.allowed, self.resets = name, limit, allowed, resets


@dataclass
class Usage:
    """What one scope has spent in one period."""

    tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    runs: int = 0
    charges: list[str] = field(default_factory=list)

    def value(self, limit: str) -> float:
        return float(getattr(self, limit))


@dataclass
class _Metered:
    """The run whose model calls are being counted (a context variable: set where the run runs)."""

    workspace: str
    user: str | None


_RUN: contextvars.ContextVar[_Metered | None] = contextvars.ContextVar("orchestra_quota_run", default=None)


class Quotas:
    """The quotas of a server's config over the storage of each workspace (see the module docstring)."""

    def __init__(self, settings: QuotaSettings, storage_of: Any) -> None:
        self.settings = settings
        self.storage_of = storage_of  # workspace -> its Storage
        # The run budgets' price table (and its wildcards).
        self.prices = Budget(prices={k: Price(v.input, v.output) for k, v in settings.prices.items()})
        self._hooked: set[int] = set()

    @property
    def active(self) -> bool:
        return bool(self.settings.limits)

    def applying(self, workspace: str, user: str | None) -> list[tuple[Quota, str, str]]:
        """The quotas that apply to a caller: each with its name and its counter's scope."""
        found = []
        for index, quota in enumerate(self.settings.limits):
            if quota.workspace != workspace:
                continue
            if quota.per == "workspace":
                found.append((quota, f"{workspace}/{quota.period}#{index}", f"ws-{index}"))
            elif user is not None:
                name = f"{workspace}/{quota.period}/user {user}#{index}"
                found.append((quota, name, f"user-{index}-{user_key(user)}"))
        return found

    @staticmethod
    def _key(scope: str, period_id: str) -> str:
        return f"quota/{scope}/{period_id}.json"

    async def read(self, storage: Storage, scope: str, period_id: str) -> tuple[Usage, Any]:
        found = await storage.read(self._key(scope, period_id))
        if found is None:
            return Usage(), ABSENT
        return Usage(**json.loads(found[0])), found[1]

    async def charge(self, workspace: str, user: str | None, charge_id: str, **amounts: float) -> None:
        """Add ``amounts`` to every counter that applies, once per ``charge_id``."""
        storage = self.storage_of(workspace)
        now = datetime.now(UTC)
        for quota, _, scope in self.applying(workspace, user):
            period_id, _ = period_of(quota.period, now)
            while True:
                usage, version = await self.read(storage, scope, period_id)
                if charge_id in usage.charges:
                    break  # a retried write that had landed
                for name, amount in amounts.items():
                    setattr(usage, name, type(getattr(usage, name))(getattr(usage, name) + amount))
                usage.charges = [*usage.charges, charge_id][-KEPT_CHARGES:]
                body = json.dumps(usage.__dict__).encode()
                try:
                    await storage.write(self._key(scope, period_id), body, expect=version)
                    break
                except (StorageConflictError, StorageOutcomeUnknownError):
                    continue  # another server charged first, or the answer was lost: read again

    async def spent(self, workspace: str, user: str | None, limits: tuple[str, ...] = LIMITS) -> None:
        """Refuse with ``QuotaExceeded`` if a quota that applies is spent (among ``limits``)."""
        storage = self.storage_of(workspace)
        now = datetime.now(UTC)
        for quota, name, scope in self.applying(workspace, user):
            period_id, resets = period_of(quota.period, now)
            usage, _ = await self.read(storage, scope, period_id)
            for limit in limits:
                allowed = getattr(quota, limit)
                if allowed is not None and usage.value(limit) >= allowed:
                    raise QuotaExceeded(name, limit, allowed, resets, now)

    async def usage(self, workspace: str, user: str | None) -> list[dict[str, Any]]:
        """What the caller's quotas have spent this period (``GET /api/v1/usage``)."""
        storage = self.storage_of(workspace)
        now = datetime.now(UTC)
        shown = []
        for quota, name, scope in self.applying(workspace, user):
            period_id, resets = period_of(quota.period, now)
            usage, _ = await self.read(storage, scope, period_id)
            shown.append(
                {
                    "quota": name,
                    "per": quota.per,
                    "period": period_id,
                    "resets_at": resets.isoformat(),
                    "limits": {k: getattr(quota, k) for k in LIMITS if getattr(quota, k) is not None},
                    "spent": {k: getattr(usage, k) for k in LIMITS},
                }
            )
        return shown

    # -- runs ----------------------------------------------------------------------------------------

    async def admit(self, workspace: str, user: str | None, run_id: str) -> None:
        """Admit a new run: refuse it if a quota is spent, else count it."""
        if not self.applying(workspace, user):
            return
        await self.spent(workspace, user)
        await self.charge(workspace, user, f"{run_id}:run", runs=1)

    def metering(self, workspace: str, user: str | None) -> contextvars.Token[_Metered | None]:
        """Count the model calls of the run that runs in this context as ``user``'s of ``workspace``."""
        return _RUN.set(_Metered(workspace, user))

    def attach(self, target: Any) -> None:
        """Check and charge the model calls of ``target``'s agents (once per hook registry)."""
        for agent in _agents(target):
            registry = agent.hooks
            if id(registry) in self._hooked:
                continue
            self._hooked.add(id(registry))
            registry.add_callback(BeforeModelCall, self._before)
            registry.add_callback(AfterModelCall, self._after)

    async def _before(self, event: BeforeModelCall) -> None:
        run = _RUN.get()
        if run is None:
            return
        if any(q.cost_usd is not None for q, _, _ in self.applying(run.workspace, run.user)):
            self.prices.check_price(event.agent.model.name, "quotas (a cost_usd quota)")
        try:
            await self.spent(run.workspace, run.user, ("tokens", "cost_usd", "model_calls"))
        except QuotaExceeded as exc:
            raise BudgetExceededError(
                f"QuotaExceeded: {exc.message}",
                limit=exc.limit,
                allowed=exc.allowed,
                spent=exc.allowed,
                scope=f"quota {exc.quota}",
            ) from None

    async def _after(self, event: AfterModelCall) -> None:
        run = _RUN.get()
        if run is None or event.exception is not None:
            return
        usage = event.usage
        input_tokens = usage.input_tokens if usage is not None else 0
        output_tokens = usage.output_tokens if usage is not None else 0
        price = self.prices.price(event.agent.model.name)
        cost = price.cost(input_tokens, output_tokens) if price is not None else 0.0
        await self.charge(
            run.workspace,
            run.user,
            str(uuid.uuid4()),  # one id per call: its write retried is counted once
            tokens=input_tokens + output_tokens,
            cost_usd=cost,
            model_calls=1,
        )


def _agents(target: Any) -> list[Any]:
    """Every agent of a target: itself, or a pipeline's (nested ones and map templates included)."""
    from orchestra.agent import Agent

    if isinstance(target, Agent):
        return [target]
    nodes = getattr(target, "nodes", None)
    if isinstance(nodes, dict):
        return [agent for node in nodes.values() for agent in _agents(node.executor)]
    template = getattr(target, "node", None)
    return _agents(template) if template is not None else []
