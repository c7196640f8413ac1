"""Run budgets on Temporal: what the workflow checks between nodes and what a node's activity checks before
each model call (the same rules and messages as a local run's meter, ``orchestra.budget.exceeded``).

The workflow holds the run's spending (in its scheduling skeleton's run document, committed with the run)
and stops the run before a node it cannot afford. A node's activity counts its own model calls on top of
what the run and the node had spent when it started, refuses a call past a limit (``BudgetExceededError``:
the node stops, resumable, as locally), and saves what it spent after every call beside the run's blobs,
so that an attempt retried after its worker died goes on from there instead of counting from zero.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from orchestra._json import dumps
from orchestra.agent import Agent
from orchestra.budget import Budget, Spent, exceeded
from orchestra.hooks import AfterModelCall, BeforeModelCall
from orchestra.multiagent import Map, MultiAgentBase
from orchestra.storage import Storage

__all__ = ["NodeMeter", "budgets_of", "plus"]


def budgets_of(orchestrator: MultiAgentBase) -> dict[str, Any]:
    """The run's budget and its nodes' (JSON), for the workflow's skeleton; empty without any."""
    nodes = {n: node.budget.to_json() for n, node in orchestrator.nodes.items() if node.budget is not None}
    if orchestrator.budget is None and not nodes:
        return {}
    return {"run": orchestrator.budget.to_json() if orchestrator.budget else None, "nodes": nodes}


def plus(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """Two spendings (``Spent`` JSON) added."""
    x, y = Spent.from_json(a), Spent.from_json(b)
    total = Spent(
        x.input_tokens + y.input_tokens,
        x.output_tokens + y.output_tokens,
        x.model_calls + y.model_calls,
        x.cost_usd + y.cost_usd,
    )
    return total.to_json()


class NodeMeter:
    """Counts one node execution's model calls against the run's budget and the node's own."""

    def __init__(
        self,
        orchestrator: MultiAgentBase,
        node_id: str,
        run_budget: Budget | None,
        elapsed_s: float,
        storage: Storage,
        key: str,
    ) -> None:
        self.orchestrator = orchestrator
        self.node_id = node_id
        self.run_budget = run_budget
        self.node_budget = orchestrator.nodes[node_id].budget
        # What the run and the node had spent when the node started (as committed), and the run's time.
        self.run_spent = orchestrator.run.get("spent")
        self.node_spent = (orchestrator.document.peek(node_id) or {}).get("spent")
        self.elapsed_s = elapsed_s
        self.began = time.monotonic()
        self.storage = storage
        self.key = key
        self.spent = Spent()  # this execution's
        self._attached: set[int] = set()  # the hook registries counted (by id)

    @property
    def metered(self) -> bool:
        return self.run_budget is not None or self.node_budget is not None

    async def restore(self) -> None:
        """Go on from what an earlier attempt of this execution spent (its worker died after a call)."""
        found = await self.storage.read(self.key)
        if found is not None:
            self.spent = Spent.from_json(json.loads(found[0]))

    def attach(self, executor: Any, node_id: str = "") -> None:
        """Count the model calls of ``executor`` (an agent, every agent of a nested orchestrator, or a
        map's template agent, which its items' copies share) as this node's (``node_id`` is the node's
        already: ``SpendingCounter``)."""
        if isinstance(executor, Agent):
            if id(executor.hooks) in self._attached:  # a map's items share their template's hooks
                return
            self._attached.add(id(executor.hooks))
            executor.hooks.add_callback(BeforeModelCall, functools.partial(self._before))
            executor.hooks.add_callback(AfterModelCall, functools.partial(self._after))
        elif isinstance(executor, MultiAgentBase):
            for node in executor.nodes.values():
                self.attach(node.executor)
        elif isinstance(executor, Map) and executor.node is not None:
            self.attach(executor.node)

    def _scope(self) -> str:
        return f"run of {self.orchestrator.kind} {self.orchestrator.id!r}"

    def _before(self, event: BeforeModelCall) -> None:
        model = event.agent.model.name
        mine = self.spent.to_json()
        if self.run_budget is not None:
            self.run_budget.check_price(model, self._scope())
            wall = self.elapsed_s + time.monotonic() - self.began
            error = exceeded(
                self.run_budget, Spent.from_json(plus(self.run_spent, mine)), wall, self._scope()
            )
            if error is not None:
                raise error
        if self.node_budget is not None:
            scope = f"agent {self.node_id!r}"
            self.node_budget.check_price(model, scope)
            error = exceeded(self.node_budget, Spent.from_json(plus(self.node_spent, mine)), 0.0, scope)
            if error is not None:
                raise error

    async def _after(self, event: AfterModelCall) -> None:
        usage = event.usage
        input_tokens = usage.input_tokens if usage is not None else 0
        output_tokens = usage.output_tokens if usage is not None else 0
        budget = self.run_budget or self.node_budget
        price = budget.price(event.agent.model.name) if budget is not None else None
        cost = price.cost(input_tokens, output_tokens) if price is not None else 0.0
        self.spent.add(input_tokens, output_tokens, cost)
        await self.storage.write(self.key, dumps(self.spent.to_json()).encode())
