"""Retry policies: how often a node, a map item, a swarm agent's turn or an agent's model call is tried
again after it fails.

A policy belongs to a node (``Graph(retry={"node": policy})``, ``GraphBuilder.add_node(..., retry=)``), to
a swarm agent (``Swarm(retry={"agent": policy})``), or to every node of an orchestrator (``retry=policy``).
A standalone agent's policy (``Agent(retry=policy)``) retries its failed model calls: the same call
again, after the policy's wait, with nothing of the turn run twice (see ``orchestra.agent``'s ``Agent``).
A node without one gets ``DEFAULT_RETRY``: model errors that are throttling or a passing provider fault
(``ModelThrottledError``, ``ModelUnavailableError``: the provider's own request retries were spent) are
tried again, three attempts in all; anything else fails the node at once, as before.

Rules every backend keeps:

- Configuration errors are never retried, whatever ``retry_on`` says: a wrong model name, missing
  credentials, a bad argument (``ConfigurationError``, ``ModelAuthenticationError``,
  ``ModelNotConfiguredError``), and a spent budget (``BudgetExceededError``).
- An attempt runs from the node's state before the node started (an agent's history and state are
  rolled back), so a retry is a clean second try.
- Each failed attempt is recorded in the run (its number, error and the wait before the next) and saved
  before the wait, so a killed process that resumes goes on with the next attempt: an attempt that
  failed is never run again, and ``max_attempts`` counts across resumes. A resume of a run that *failed*
  (its attempts were spent) gives the node a fresh set of attempts: that resume is the user's decision
  to try again.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from orchestra._imports import import_object
from orchestra.errors import (
    BudgetExceededError,
    ConfigurationError,
    ModelAuthenticationError,
    ModelError,
    ModelNotConfiguredError,
    ModelThrottledError,
    ModelUnavailableError,
)

__all__ = [
    "DEFAULT_RETRY",
    "NEVER_RETRIED",
    "RetryPolicy",
    "attempt_note",
    "describe_failure",
    "run_with_retries",
]

T = TypeVar("T")

NEVER_RETRIED: tuple[type[BaseException], ...] = (
    ConfigurationError,
    ModelAuthenticationError,
    ModelNotConfiguredError,
    BudgetExceededError,
)
"""Errors no policy retries: trying again cannot fix them."""

# The names YAML (and ``RetryPolicy.from_json``) use for the common error kinds.
ERROR_NAMES: dict[str, type[BaseException]] = {
    "model_throttled": ModelThrottledError,
    "model_unavailable": ModelUnavailableError,
    "model_error": ModelError,
    "timeout": TimeoutError,
    "any": Exception,
}


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed node is tried again.

    Args:
        max_attempts: attempts in all, the first included (1: no retry).
        initial_interval: seconds before the second attempt.
        backoff: each wait is this many times the one before.
        max_interval: the longest wait, in seconds (None: no cap).
        jitter: the fraction of each wait that is random (0.2: between 80% and 100% of it), so that many
            nodes failing together do not retry in lockstep. Temporal applies no jitter of its own.
        retry_on: the exception types that are retried (subclasses included); a node's timeout is a
            ``TimeoutError``. ``NEVER_RETRIED`` errors are not retried even when listed.
    """

    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float | None = 30.0
    jitter: float = 0.2
    retry_on: tuple[type[BaseException], ...] = (ModelThrottledError, ModelUnavailableError)
    _rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(f"RetryPolicy.max_attempts must be at least 1, got {self.max_attempts}")
        if self.initial_interval < 0:
            raise ConfigurationError(
                f"RetryPolicy.initial_interval must be 0 or more, got {self.initial_interval}"
            )
        if self.backoff < 1:
            raise ConfigurationError(f"RetryPolicy.backoff must be at least 1, got {self.backoff}")
        if self.max_interval is not None and self.max_interval < self.initial_interval:
            raise ConfigurationError(
                f"RetryPolicy.max_interval ({self.max_interval}) is shorter than initial_interval "
                f"({self.initial_interval})"
            )
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"RetryPolicy.jitter is a fraction between 0 and 1, got {self.jitter}")
        retry_on = tuple(self.retry_on)
        for kind in retry_on:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise ConfigurationError(
                    f"RetryPolicy.retry_on lists {kind!r}, which is not an exception type"
                )
        object.__setattr__(self, "retry_on", retry_on)

    def retries(self, error: BaseException) -> bool:
        """Whether a failed attempt that raised ``error`` is tried again (attempts left aside)."""
        if isinstance(error, NEVER_RETRIED):
            return False
        return isinstance(error, self.retry_on)

    def interval(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (1-based), before jitter."""
        wait = self.initial_interval * self.backoff ** (attempt - 1)
        return wait if self.max_interval is None else min(wait, self.max_interval)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based) before the next one."""
        wait = self.interval(attempt)
        if self.jitter:
            wait *= 1 - self.jitter * self._rng.random()
        return wait

    def to_json(self) -> dict[str, Any]:
        """The policy as JSON (error types by name or import path); see ``from_json``."""
        names = {kind: name for name, kind in ERROR_NAMES.items()}
        return {
            "max_attempts": self.max_attempts,
            "initial_interval": self.initial_interval,
            "backoff": self.backoff,
            "max_interval": self.max_interval,
            "jitter": self.jitter,
            "retry_on": [
                names.get(kind) or f"{kind.__module__}:{kind.__qualname__}" for kind in self.retry_on
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetryPolicy:
        """A policy from ``to_json`` (or YAML's ``retry:``): ``retry_on`` names (``model_throttled``,
        ``model_unavailable``, ``model_error``, ``timeout``, ``any``) or ``package.module:Class`` paths."""
        options = {k: v for k, v in data.items() if v is not None or k == "max_interval"}
        if "retry_on" in options:
            options["retry_on"] = error_types(options["retry_on"])
        return cls(**options)


def error_types(names: Iterable[str]) -> tuple[type[BaseException], ...]:
    """Exception types from their YAML names or import paths.

    Raises:
        ConfigurationError: a name that is neither, or a path to something that is not an exception type.
    """
    found: list[type[BaseException]] = []
    for name in names:
        kind: Any = ERROR_NAMES.get(name)
        if kind is None:
            if ":" not in name:
                raise ConfigurationError(
                    f"retry_on: unknown error kind {name!r}; use {', '.join(ERROR_NAMES)} or package.module:Class"
                )
            kind = import_object(name)
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise ConfigurationError(f"retry_on: {name!r} is not an exception type")
        found.append(kind)
    return tuple(found)


DEFAULT_RETRY = RetryPolicy()
"""What a node without a policy gets: throttling and passing provider faults, 3 attempts, 1 s then 2 s."""


async def run_with_retries(
    policy: RetryPolicy,
    attempt: int,
    call: Callable[[int], Awaitable[T]],
    failed: Callable[[int, BaseException, float], Awaitable[None]],
) -> T:
    """``call(attempt)`` until it returns, or raises what the policy does not retry (raised as it is).

    ``attempt`` is the number of the first attempt to make (after ``attempt - 1`` recorded ones, when a
    resumed run goes on). Before each wait, ``failed(attempt, error, wait)`` records the failed attempt
    (and saves it: the wait is when a killed process would lose it).
    """
    while True:
        try:
            return await call(attempt)
        except Exception as error:
            if attempt >= policy.max_attempts or not policy.retries(error):
                raise
            wait = policy.delay(attempt)
            await failed(attempt, error, wait)
            await anyio.sleep(wait)
            attempt += 1


def describe_failure(error: BaseException, timeout: float | None, what: str) -> str:
    """How a failed attempt of ``what`` (``node 'a'``, ``agent 'b'``, ``item 3``) is recorded and
    reported, the same on every backend."""
    if isinstance(error, TimeoutError):
        limit = f" ({timeout:g}s)" if timeout is not None else ""
        return f"node_timeout{limit} exceeded by {what}"
    return f"{type(error).__name__}: {error}"


def attempt_note(attempt: int, policy: RetryPolicy) -> str:
    """What a final failure adds when it was not the first attempt."""
    return f" (attempt {attempt} of {policy.max_attempts})" if attempt > 1 else ""
