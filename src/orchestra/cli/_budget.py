"""``--budget-tokens``, ``--budget-cost``, ``--budget-calls``, ``--budget-seconds`` and ``--prices`` of
``orchestra run`` and ``orchestra resume``: a run's budget from the command line (see
``orchestra.budget``). Each flag replaces that limit of the spec's ``budget:``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from orchestra.budget import Budget, Spent
from orchestra.errors import ConfigurationError

__all__ = [
    "BudgetCalls",
    "BudgetCost",
    "BudgetFlags",
    "BudgetSeconds",
    "BudgetTokens",
    "PricesOption",
]

BudgetTokens = Annotated[
    int | None,
    typer.Option(
        "--budget-tokens", metavar="N", min=0, help="Stop the run before it spends more than N tokens."
    ),
]
BudgetCost = Annotated[
    float | None,
    typer.Option(
        "--budget-cost", metavar="USD", min=0, help="Stop the run at this cost (needs prices for its models)."
    ),
]
BudgetCalls = Annotated[
    int | None, typer.Option("--budget-calls", metavar="N", min=0, help="Stop the run after N model calls.")
]
BudgetSeconds = Annotated[
    float | None,
    typer.Option("--budget-seconds", metavar="S", min=0, help="Stop the run after S seconds of running."),
]
PricesOption = Annotated[
    Path | None,
    typer.Option(
        "--prices",
        metavar="FILE",
        exists=True,
        dir_okay=False,
        help="Model prices for --budget-cost: YAML or JSON {model: {input: USD, output: USD}} per million tokens.",
    ),
]


@dataclass(frozen=True)
class BudgetFlags:
    """The budget flags of one command line."""

    tokens: int | None = None
    cost_usd: float | None = None
    model_calls: int | None = None
    wall_seconds: float | None = None
    prices: Path | None = None

    def given(self) -> bool:
        return any(
            v is not None
            for v in (self.tokens, self.cost_usd, self.model_calls, self.wall_seconds, self.prices)
        )

    def apply(self, target: Any) -> None:
        """Set the budget of ``target`` (the spec's, with the given limits and prices replaced).

        Raises:
            ConfigurationError: the price file cannot be read.
        """
        if not self.given():
            return
        budget = target.budget or Budget()
        prices = {**budget.prices, **_read_prices(self.prices)} if self.prices else budget.prices
        target.budget = replace(budget, prices=prices).with_limits(
            tokens=self.tokens,
            cost_usd=self.cost_usd,
            model_calls=self.model_calls,
            wall_seconds=self.wall_seconds,
        )

    def options(self) -> list[str]:
        """The flags as command-line words (repeated in the resume command a run prints)."""
        words: list[str] = []
        for flag, value in (
            ("--budget-tokens", self.tokens),
            ("--budget-cost", self.cost_usd),
            ("--budget-calls", self.model_calls),
            ("--budget-seconds", self.wall_seconds),
            ("--prices", self.prices),
        ):
            if value is not None:
                words += [flag, str(value)]
        return words

    def raised(self, run: Mapping[str, Any]) -> BudgetFlags | None:
        """These flags with every limit the run reached raised, so that a resume with them goes on.

        ``run`` is the stopped run's record (``MultiAgentBase.run``): the limits it ran under and what it
        spent. Each reached limit is doubled (and set past what was spent: a call may end over a token or
        cost limit); the limits it did not reach stay as given. None when the run reached none of its own
        limits: one of its agents' budgets stopped it, which only the spec can raise.
        """
        limits: Mapping[str, float] = run.get("budget") or {}
        spent = Spent.from_json(run.get("spent"))
        used = {
            "tokens": spent.tokens,
            "cost_usd": spent.cost_usd,
            "model_calls": spent.model_calls,
            "wall_seconds": float(run.get("execution_time_ms") or 0) / 1000,
        }
        larger: dict[str, Any] = {
            name: _doubled(name, max(float(allowed), used[name]))
            for name, allowed in limits.items()
            if name in used and used[name] >= allowed
        }
        return replace(self, **larger) if larger else None


def _doubled(limit: str, reached: float) -> float:
    """Twice what was reached, rounded up to what the flag is written in (whole tokens, calls and
    seconds, cents); at least one unit, so that a limit of 0 grows too."""
    if limit == "cost_usd":
        return max(math.ceil(reached * 200) / 100, 0.01)
    return max(math.ceil(reached * 2), 1)


def _read_prices(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"--prices {path}: cannot read the price table: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"--prices {path}: a price table is a mapping {{model: {{input:, output:}}}}"
        )
    return data
