"""A standalone agent's budget and retry policy (``Agent(budget=..., retry=...)``), applied to its model
calls through its hooks, as ``multiagent/_metering.py`` applies a run's.

- The budget caps one invocation: what it spends is counted from zero when the invocation starts
  (``BeforeInvocation``), checked before every model call (``BeforeModelCall`` raises
  ``BudgetExceededError``, which rolls the turn back like any failure) and charged after it. Nothing of
  it is saved: a session keeps the conversation, not what a turn spent.
- The retry policy makes a failed model call again (``AfterModelCall.retry``) after the policy's wait,
  while its ``retry_on`` matches and attempts are left; nothing else of the turn runs again.

Both read the agent's current ``budget`` and ``retry`` at each call, so changing them between
invocations takes effect at once. The counts are kept per agent (a map's item agents share their
template's hooks).
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING

import anyio

from orchestra.budget import Spent, exceeded
from orchestra.hooks import AfterModelCall, BeforeInvocation, BeforeModelCall, HookRegistry
from orchestra.retry import describe_failure

if TYPE_CHECKING:
    from orchestra.agent.protocol import AgentLike

__all__ = ["InvocationMeter", "ModelCallRetries"]


class InvocationMeter:
    """Counts each invocation's model calls against ``agent.budget``."""

    def __init__(self) -> None:
        self._spent: weakref.WeakKeyDictionary[AgentLike, tuple[Spent, float]] = weakref.WeakKeyDictionary()

    def register_hooks(self, registry: HookRegistry) -> None:
        registry.add_callback(BeforeInvocation, self._start)
        registry.add_callback(BeforeModelCall, self._check)
        registry.add_callback(AfterModelCall, self._charge)

    def _start(self, event: BeforeInvocation) -> None:
        self._spent[event.agent] = (Spent(), time.perf_counter())

    def _check(self, event: BeforeModelCall) -> None:
        agent = event.agent
        budget = agent.budget
        if budget is None:
            return
        scope = f"agent {agent.name!r}"
        budget.check_price(agent.model.name, scope)
        spent, started = self._spent.get(agent) or (Spent(), time.perf_counter())
        error = exceeded(
            budget,
            spent,
            time.perf_counter() - started,
            scope,
            advice="its turn was rolled back: invoke it again with a larger budget",
        )
        if error is not None:
            raise error

    def _charge(self, event: AfterModelCall) -> None:
        agent = event.agent
        budget = agent.budget
        if budget is None or agent not in self._spent:
            return
        usage = event.usage
        input_tokens = usage.input_tokens if usage is not None else 0
        output_tokens = usage.output_tokens if usage is not None else 0
        price = budget.price(agent.model.name)
        cost = price.cost(input_tokens, output_tokens) if price is not None else 0.0
        self._spent[agent][0].add(input_tokens, output_tokens, cost)


class ModelCallRetries:
    """Makes a failed model call again by ``agent.retry``."""

    def __init__(self) -> None:
        self._attempt: weakref.WeakKeyDictionary[AgentLike, int] = weakref.WeakKeyDictionary()

    def register_hooks(self, registry: HookRegistry) -> None:
        registry.add_callback(BeforeInvocation, self._start)
        registry.add_callback(AfterModelCall, self._after)

    def _start(self, event: BeforeInvocation) -> None:
        self._attempt.pop(event.agent, None)

    async def _after(self, event: AfterModelCall) -> None:
        agent = event.agent
        policy = agent.retry
        error = event.exception
        attempt = self._attempt.pop(agent, 1)
        if policy is None or error is None or attempt >= policy.max_attempts or not policy.retries(error):
            return
        wait = policy.delay(attempt)
        agent.log.warning(
            "model_call_retried",
            attempt=attempt,
            max_attempts=policy.max_attempts,
            error=describe_failure(error, None, f"agent {agent.name!r}"),
            retry_in=round(wait, 3),
        )
        await anyio.sleep(wait)
        self._attempt[agent] = attempt + 1
        event.retry = True
