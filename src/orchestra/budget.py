"""Budgets: tokens, cost, model calls and wall time a run (or one of its agents) may spend.

``Graph(..., budget=Budget(tokens=200_000, cost_usd=2.0))`` caps the whole run, nested runs and map items
included; ``budgets={"writer": Budget(model_calls=10)}`` caps one agent node. What the run spent is kept
in its run record (``run.spent``, and ``spent`` in each agent node's record), saved after every model
call, and counted across resumes: a run resumed after a kill goes on from what it had spent, the calls
of a node that was running when the process died included.

A budget is checked before every model call (and before a node starts): once a limit is reached the run
stops before the next call, saved as INTERRUPTED with a ``BudgetExceeded: ...`` reason. The call that
crosses a limit completes (its tokens are known only when it ends), so a run may end a little over its
token or cost budget, never over its ``model_calls``. Resume it with a larger budget (``orchestra resume
--budget-tokens N``, or the orchestrator built with a larger ``budget=``); resumed with the same budget,
it stops again before its next model call.

A standalone agent's budget (``Agent(budget=...)``) caps each invocation: see ``orchestra.agent``'s
``Agent`` and docs/concepts.md. The pieces here are pure (no orchestrator, no I/O), so that the agent
layer and the multi-agent layer share them.

Cost comes from a price table, ``Budget(prices={"openai:gpt-4o-mini": Price(input=0.15, output=0.60)})``
(US dollars per million tokens, keyed by the model's name as ``agent.model.name`` gives it, ``*`` and
``?`` wildcards allowed). orchestra ships no prices: providers change them and a stale table would
undercount silently. A ``cost_usd`` budget with a model that has no price refuses to run (a
``ConfigurationError`` naming the model), so cost is never counted as zero.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from orchestra.errors import BudgetExceededError, ConfigurationError

__all__ = ["Budget", "Price", "Spent", "exceeded"]

LIMITS = ("tokens", "cost_usd", "model_calls", "wall_seconds")


@dataclass(frozen=True)
class Price:
    """A model's price in US dollars per million tokens."""

    input: float
    output: float

    def __post_init__(self) -> None:
        if self.input < 0 or self.output < 0:
            raise ConfigurationError(f"a price is 0 or more dollars per million tokens, got {self}")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


def _price(value: Price | Mapping[str, float] | tuple[float, float], model: str) -> Price:
    if isinstance(value, Price):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"input", "output"}
        if unknown or len(value) != 2:
            raise ConfigurationError(
                f"the price of {model!r} is {{input: USD per million input tokens, output: ...}}, got {dict(value)}"
            )
        return Price(float(value["input"]), float(value["output"]))
    if isinstance(value, tuple | list) and len(value) == 2:
        return Price(float(value[0]), float(value[1]))
    raise ConfigurationError(f"the price of {model!r} is a Price, {{input:, output:}} or (input, output)")


@dataclass(frozen=True)
class Budget:
    """Limits on what a run (or one agent of it) may spend; None: no limit.

    Args:
        tokens: input and output tokens, every model call of the run.
        cost_usd: dollars, from ``prices``.
        model_calls: model calls.
        wall_seconds: seconds the run has been running, across resumes (time between invocations, while
            the run waited, does not count).
        prices: ``{model name or pattern: Price}`` (or ``{input:, output:}`` mappings, ``(input, output)``
            pairs), dollars per million tokens.
    """

    tokens: int | None = None
    cost_usd: float | None = None
    model_calls: int | None = None
    wall_seconds: float | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in LIMITS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int | float) or value < 0 or math.isnan(value)):
                raise ConfigurationError(f"Budget.{name} must be a number, 0 or more; got {value!r}")
        object.__setattr__(self, "prices", {k: _price(v, k) for k, v in dict(self.prices).items()})

    def with_limits(self, **limits: Any) -> Budget:
        """This budget with the given limits replaced (those given as None are left as they are)."""
        return replace(self, **{k: v for k, v in limits.items() if v is not None})

    def price(self, model: str) -> Price | None:
        """The price of ``model``: an exact entry, else the longest matching pattern."""
        found = self.prices.get(model)
        if found is not None:
            return found
        patterns = sorted((p for p in self.prices if fnmatch.fnmatchcase(model, p)), key=len, reverse=True)
        return self.prices[patterns[0]] if patterns else None

    def check_price(self, model: str, scope: str) -> None:
        """Refuse a model that a cost budget could not count.

        Raises:
            ConfigurationError: ``cost_usd`` is set and ``model`` has no price.
        """
        if self.cost_usd is not None and self.price(model) is None:
            raise ConfigurationError(
                f"{scope} has a cost_usd budget but no price for model {model!r}: add it to the budget's "
                "prices (Budget(prices={...}), YAML budget: {prices: {...}}, or orchestra run --prices FILE), "
                "in US dollars per million input and output tokens; orchestra ships no prices"
            )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            name: getattr(self, name) for name in LIMITS if getattr(self, name) is not None
        }
        if self.prices:
            data["prices"] = {k: {"input": p.input, "output": p.output} for k, p in self.prices.items()}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Budget:
        return cls(**dict(data))


@dataclass
class Spent:
    """What a run (or an agent node) has spent; kept in the run document as ``spent``."""

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.model_calls += 1
        self.cost_usd += cost

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "cost_usd": round(self.cost_usd, 9),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Spent:
        data = data or {}
        return cls(
            int(data.get("input_tokens", 0)),
            int(data.get("output_tokens", 0)),
            int(data.get("model_calls", 0)),
            float(data.get("cost_usd", 0.0)),
        )


def exceeded(
    budget: Budget,
    spent: Spent,
    wall_seconds: float,
    scope: str,
    advice: str = "resume it with a larger budget",
) -> BudgetExceededError | None:
    """The error a run stops with if ``spent`` (and ``wall_seconds``) reached a limit of ``budget``
    (``advice``: what the message tells the user to do)."""
    used = {
        "tokens": spent.tokens,
        "cost_usd": spent.cost_usd,
        "model_calls": spent.model_calls,
        "wall_seconds": wall_seconds,
    }
    for name in LIMITS:
        allowed = getattr(budget, name)
        if allowed is not None and used[name] >= allowed:
            shown = f"{used[name]:.4f}" if isinstance(used[name], float) else f"{used[name]:,}"
            return BudgetExceededError(
                f"BudgetExceeded: {scope} spent its {name} budget ({shown} of {allowed:,}); {advice}",
                limit=name,
                allowed=float(allowed),
                spent=float(used[name]),
                scope=scope,
            )
    return None
