"""The meter that counts a run's model calls against its budgets (see ``budget.py`` for the rules).

It reaches the agent loop through hooks only: ``BeforeModelCall`` checks the budgets (and raises
``BudgetExceededError`` before a call the run can no longer afford), ``AfterModelCall`` charges the call's
tokens and cost to the run and to the agent node, and saves the run (so a kill loses no spending).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from orchestra.agent import Agent
from orchestra.budget import Budget, Spent, exceeded
from orchestra.errors import ModelNotConfiguredError
from orchestra.hooks import AfterModelCall, BeforeModelCall, HookRegistry
from orchestra.multiagent._orchestrator import Orchestrator
from orchestra.multiagent.map import Map

__all__ = ["Meter", "SpendingCounter"]


class SpendingCounter(Protocol):
    """What counts the model calls of an executor built during a run (``Meter``, or a Temporal
    activity's meter)."""

    def attach(self, executor: Any, node_id: str) -> None: ...


class Meter:
    """Counts the model calls of one orchestrator's runs (its agents, nested runs' and map items')."""

    def __init__(self, orchestrator: Orchestrator) -> None:
        self.orchestrator = orchestrator
        self._attached: set[int] = set()  # the hook registries already counted (by id; they live as long)
        self._registries: list[HookRegistry] = []  # keeps them alive, so their ids stay theirs
        for node_id, node in orchestrator.nodes.items():
            self.attach(node.executor, node_id)

    def attach(self, executor: Any, node_id: str) -> None:
        """Count the model calls of ``executor`` (an agent, or every agent of a nested orchestrator or a
        map's template) as calls of node ``node_id``."""

        if isinstance(executor, Agent):
            registry = executor.hooks
            if id(registry) in self._attached:
                return
            self._attached.add(id(registry))
            self._registries.append(registry)
            registry.add_callback(BeforeModelCall, functools.partial(self._before, node_id))
            registry.add_callback(AfterModelCall, functools.partial(self._after, node_id))
        elif isinstance(executor, Orchestrator):
            for node in executor.nodes.values():
                self.attach(node.executor, node_id)
        elif isinstance(executor, Map) and executor.node is not None:
            self.attach(executor.node, node_id)

    def start(self) -> None:
        """At the start of an invocation: refuse a cost budget whose price table misses a known model."""
        orchestrator = self.orchestrator
        for node_id, node in orchestrator.nodes.items():
            for agent in _agents(node.executor):
                model = agent.model.name
                if orchestrator.budget is not None:
                    orchestrator.budget.check_price(model, self._run_scope())
                if node.budget is not None:
                    node.budget.check_price(model, f"agent {node_id!r}")

    def _run_scope(self) -> str:
        return f"run of {self.orchestrator.kind} {self.orchestrator.id!r}"

    def _before(self, node_id: str, event: BeforeModelCall) -> None:
        orchestrator = self.orchestrator
        model = event.agent.model.name
        budget = orchestrator.budget
        if budget is not None:
            budget.check_price(model, self._run_scope())
            spent = Spent.from_json(orchestrator.run.get("spent"))
            error = exceeded(budget, spent, orchestrator.elapsed_ms() / 1000, self._run_scope())
            if error is not None:
                raise error
        node_budget = orchestrator.nodes[node_id].budget
        if node_budget is not None:
            node_budget.check_price(model, f"agent {node_id!r}")
            record = orchestrator.document.peek(node_id) or {}
            error = exceeded(node_budget, Spent.from_json(record.get("spent")), 0.0, f"agent {node_id!r}")
            if error is not None:
                raise error

    async def _after(self, node_id: str, event: AfterModelCall) -> None:
        orchestrator = self.orchestrator
        usage = event.usage
        input_tokens = usage.input_tokens if usage is not None else 0
        output_tokens = usage.output_tokens if usage is not None else 0
        model = event.agent.model.name
        run_spent = Spent.from_json(orchestrator.run.get("spent"))
        run_spent.add(
            input_tokens, output_tokens, _cost(orchestrator.budget, model, input_tokens, output_tokens)
        )
        orchestrator.document.update_run(spent=run_spent.to_json())
        node_budget = orchestrator.nodes[node_id].budget
        node_spent = Spent.from_json((orchestrator.document.peek(node_id) or {}).get("spent"))
        node_spent.add(input_tokens, output_tokens, _cost(node_budget, model, input_tokens, output_tokens))
        orchestrator.document.update_node(node_id, spent=node_spent.to_json())
        await orchestrator.save_progress(node_id)


def _cost(budget: Budget | None, model: str, input_tokens: int, output_tokens: int) -> float:
    price = budget.price(model) if budget is not None else None
    return price.cost(input_tokens, output_tokens) if price is not None else 0.0


def _agents(executor: Any) -> list[Agent]:
    """The agents an executor runs that are known before the run (a map's factory builds its own)."""

    if isinstance(executor, Agent):
        try:
            executor.model  # noqa: B018 - an agent without a model fails at its first call, not here
        except ModelNotConfiguredError:
            return []
        return [executor]
    if isinstance(executor, Orchestrator):
        return [agent for node in executor.nodes.values() for agent in _agents(node.executor)]
    if isinstance(executor, Map) and executor.node is not None:
        return _agents(executor.node)
    return []
