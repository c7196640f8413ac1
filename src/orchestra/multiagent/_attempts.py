"""A node's attempts in the local runner: its retry policy, its timeout, each failed attempt saved."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from orchestra.errors import BudgetExceededError
from orchestra.multiagent._orchestrator import Orchestrator
from orchestra.multiagent._scheduler import Scheduler
from orchestra.multiagent.nodes import NodeInput
from orchestra.multiagent.results import NodeResult, Status
from orchestra.retry import DEFAULT_RETRY, attempt_note, describe_failure, run_with_retries

__all__ = ["run_attempts"]


async def run_attempts(
    orchestrator: Orchestrator,
    scheduler: Scheduler,
    node_id: str,
    node_input: NodeInput,
    call: Callable[[], Awaitable[NodeResult]],
    node_timeout: float | None,
    what: str,
) -> NodeResult:
    """Run a node by its retry policy: each failed attempt recorded (``Scheduler.record_attempt``) and
    saved before its wait; a final failure is a FAILED result, a budget reached an INTERRUPTED one (the
    reason in ``error``). A resumed node goes on from the attempts its execution already made. The
    result carries the node input's ``execution_count``."""
    policy = orchestrator.nodes[node_id].retry or DEFAULT_RETRY

    def attempt(number: int) -> Awaitable[NodeResult]:
        node_input.attempt = number
        return call() if node_timeout is None else timed()  # no cancel scope on the common path

    async def timed() -> NodeResult:
        with anyio.fail_after(node_timeout):
            return await call()

    async def failed(number: int, error: BaseException, wait: float) -> None:
        scheduler.record_attempt(node_id, number, describe_failure(error, node_timeout, what), wait)
        await orchestrator.save_progress(node_id)

    try:
        return await run_with_retries(policy, len(scheduler.attempts(node_id)) + 1, attempt, failed)
    except BudgetExceededError as exc:
        status, error = Status.INTERRUPTED, str(exc)
    except Exception as exc:
        status = Status.FAILED
        error = describe_failure(exc, node_timeout, what) + attempt_note(node_input.attempt, policy)
    return NodeResult(node_id=node_id, status=status, error=error, execution_count=node_input.execution_count)
