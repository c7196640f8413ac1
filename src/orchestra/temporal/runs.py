"""A run's workflow as a client outside the workers sees it (a server): found or started, followed,
answered and stopped, with Temporal's answers turned into orchestra's errors, so that the caller imports
no temporalio and decides by type:

| Temporal answers | raised |
| --- | --- |
| no connection, or an RPC error (unavailable, refused, timed out) | ``TemporalUnavailableError`` |
| a workflow already runs under the id being started (another client started it first) | ``WorkflowBusyError`` |
| the workflow failed, or was terminated | ``WorkflowFailedError`` (the failing activity's reason) |
| a signal or query to a workflow that ended, a query no worker serves, or that failed | ``WorkflowRequestError`` |

Anything else (a payload the data converter cannot encode, a bug) is not Temporal's answer and propagates
as it is; errors of orchestra's own (the task written to storage before the start) pass through too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from orchestra.errors import (
    OrchestraError,
    TemporalUnavailableError,
    WorkflowBusyError,
    WorkflowFailedError,
    WorkflowRequestError,
)
from orchestra.temporal._types import RunRequest
from orchestra.temporal.worker import (
    TemporalConnection,
    TemporalTarget,
    connect,
    running_workflow,
    start_run,
)
from orchestra.temporal.workflow import PipelineWorkflow

__all__ = ["RunWorkflow", "WorkflowRuns"]


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def _connecting(address: str) -> Iterator[None]:
    """Whatever connecting raises means Temporal was not reached (the SDK raises a bare RuntimeError),
    but orchestra's own errors: a connection misconfigured here (a certificate that cannot be read)."""
    try:
        yield
    except OrchestraError:
        raise
    except Exception as exc:
        raise TemporalUnavailableError(address, _first_line(exc)) from None


# What Temporal answers a request to a workflow that cannot take it, Temporal itself being fine: it ended
# or never was (NOT_FOUND), or no worker polls its queue to answer a query (FAILED_PRECONDITION).
_NOT_TAKEN = (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)


@contextlib.contextmanager
def _as_orchestra_errors(address: str, workflow: str | None = None, request: str = "") -> Iterator[None]:
    """Temporal's exceptions raised in the block, as the table of the module docstring says; ``workflow``
    and ``request`` name the workflow asked and what it was asked, if the block asks one."""
    try:
        yield
    except WorkflowFailureError as exc:
        cause: BaseException = exc
        while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
            cause = cause.__cause__  # the workflow's failure wraps the activity's, which says why
        raise WorkflowFailedError(_first_line(cause)) from None
    except WorkflowAlreadyStartedError as exc:
        raise WorkflowBusyError(exc.workflow_id) from None
    except WorkflowQueryRejectedError as exc:
        assert workflow is not None
        status = exc.status.name if exc.status is not None else "unknown"
        raise WorkflowRequestError(workflow, request, f"rejected (the workflow is {status})") from None
    except WorkflowQueryFailedError as exc:
        assert workflow is not None
        raise WorkflowRequestError(workflow, request, _first_line(exc)) from None
    except RPCError as exc:
        reason = f"{exc.message} ({exc.status.name})"
        if workflow is not None and exc.status in _NOT_TAKEN:
            raise WorkflowRequestError(workflow, request, reason) from None
        raise TemporalUnavailableError(address, reason) from None


class RunWorkflow:
    """The workflow of one run: its progress, its end, answers to its interrupts, its stop."""

    def __init__(self, handle: WorkflowHandle[Any, Any], address: str) -> None:
        self._handle = handle
        self._address = address

    @property
    def id(self) -> str:
        return self._handle.id

    async def progress(self) -> dict[str, Any]:
        """The run as the workflow holds it: ``status``, ``nodes``, ``executions``, ``interrupts``."""
        with _as_orchestra_errors(self._address, self.id, "query progress"):
            progress: dict[str, Any] = await self._handle.query(PipelineWorkflow.progress)
        return progress

    async def result(self) -> Any:
        """The workflow's outcome (a small summary; the run itself is in the session), once it ends."""
        with _as_orchestra_errors(self._address, self.id, "result"):
            return await self._handle.result()

    async def answer(self, responses: dict[str, Any]) -> None:
        """Send answers to the run's open interrupts (its ``respond`` signal)."""
        with _as_orchestra_errors(self._address, self.id, "signal respond"):
            await self._handle.signal(PipelineWorkflow.respond, responses)

    async def terminate(self, reason: str) -> bool:
        """End the workflow now (no cleanup in the workflow, no further activity scheduled); whether it
        was still running (False: it had ended)."""
        with _as_orchestra_errors(self._address):
            try:
                await self._handle.terminate(reason=reason)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:  # ended (or never was): nothing to stop
                    return False
                raise
        return True


class WorkflowRuns:
    """The runs' workflows on one Temporal target, for a client that starts and follows them (a server):
    one client, connected on first use."""

    def __init__(self, target: TemporalTarget, connection: TemporalConnection | None = None) -> None:
        self.target = target
        self._connection = connection
        self._client: Client | None = None
        self._connecting = anyio.Lock()

    async def client(self) -> Client:
        async with self._connecting:
            if self._client is None:
                with _connecting(self.target.address):
                    self._client = await connect(self.target, self._connection)
            return self._client

    async def find(self, workflow: str) -> RunWorkflow | None:
        """The workflow with id ``workflow`` if it is running (None: it ended, or never was)."""
        client = await self.client()
        with _as_orchestra_errors(self.target.address):
            handle = await running_workflow(client, workflow)
        return None if handle is None else RunWorkflow(handle, self.target.address)

    async def start_or_join(self, request: RunRequest, *, workflow: str, join: bool) -> RunWorkflow:
        """The workflow ``workflow`` of a run: the one running under that id when ``join`` (a run taken
        over, a resume) or when ``request.responses`` answers it (sent as its ``respond`` signal); else a
        new one, started with ``request`` (``start_run``).

        Raises:
            WorkflowBusyError: one runs there that the request neither joins nor answers, or another
                client started one under that id first.
            WorkflowRequestError: the running workflow ended before ``request.responses`` reached it
                (they were not taken).
            TemporalUnavailableError: Temporal was not reached, or refused.
        """
        running = await self.find(workflow)
        if running is not None:
            if request.responses:
                await running.answer(request.responses)
            elif not join:
                raise WorkflowBusyError(running.id)
            return running
        client = await self.client()
        with _as_orchestra_errors(self.target.address):
            handle = await start_run(client, self.target, request, workflow=workflow)
        return RunWorkflow(handle, self.target.address)

    async def stop(self, workflow: str, reason: str) -> bool:
        """Terminate the workflow ``workflow`` if it runs; whether it did.

        Raises:
            TemporalUnavailableError: Temporal was not reached, or refused: the workflow may still run.
        """
        running = await self.find(workflow)
        return running is not None and await running.terminate(reason)
