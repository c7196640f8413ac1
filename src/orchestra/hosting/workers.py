"""A hosted pipeline's runs on Temporal workers (the config's ``temporal:``; docs/temporal.md).

A run of a pipeline that runs on workers (``ServerConfig.on_workers``), or that was moved there
(``POST /api/v1/runs/{id}/move``), is started as the workflow of its pipeline and session through the
public ``orchestra.temporal`` API, on the storage keys of the pipeline's sessions (``storage_uri_under``:
the workers open the very keys this server reads). The server follows it as ``orchestra run --on`` does:

- its progress as the events a local run sends (``node_start``, ``node_stop``), polled from the workflow;
- its end read back from the session into the run's record (completed, failed, interrupted: the
  record and the answer are those of a local run, nodes included);
- a workflow already running for the session is followed, not started twice: a run taken over from a
  gone server, or answers to its interrupts (sent to it as its ``respond`` signal). A new task while
  one runs there is refused (409);
- a stop (cancel, a newer message) terminates the workflow: the session keeps the completed nodes, and a
  resume or a move goes on from them;
- a Temporal that cannot be reached or refuses is a 503 (``temporal_unavailable``) that says where; a
  run the workers ended that the session here does not show ended (workers on other storage) fails
  saying so.

temporalio is imported here, when a run goes to workers; the config checked at start that it is there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from orchestra.errors import OrchestraError
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.outcomes import Refused
from orchestra.hosting.stopping import Stopped
from orchestra.multiagent import MultiAgentBase
from orchestra.multiagent.results import MultiAgentResult, output_text
from orchestra.session.admin import load_scope
from orchestra.storage import storage_uri_under
from orchestra.waits import open_waits

if TYPE_CHECKING:
    from orchestra.hosting.events import EventLog
    from orchestra.hosting.invocation import Invocation
    from orchestra.hosting.records import RunRecord
    from orchestra.hosting.stops import Stop
    from orchestra.storage import Storage

__all__ = ["Workers", "no_session", "not_replacing", "sessions_prefix"]

_POLL_S = 0.25  # how often a followed run's progress is asked for (a query: no history event)


def sessions_prefix(workspace: str, agent_id: str) -> str:
    """Where a hosted pipeline's sessions are, under the server's storage (``Workspaces.agent_storage``)."""
    return f"ws/{workspace}/agents/{agent_id}"


def no_session(agent_id: str) -> Refused:
    """A run on workers without a session: refused (400), as the workflow keeps the run in one."""
    return Refused(
        400,
        "session_required",
        f"{agent_id!r} runs on Temporal workers, which keep its run in a session: give a session_id",
    )


def not_replacing(agent_id: str, policy: str) -> Refused:
    """A message to a pipeline on workers whose policy would replace the running run: refused (400)."""
    return Refused(
        400,
        "policy_not_on_workers",
        f"{agent_id!r} runs on Temporal workers, where on_busy {policy!r} cannot start a new run in place "
        "of the session's stopped one: send it with enqueue or reject",
    )


class Workers:
    """The server's Temporal client (made on first use) and the runs it sends to workers."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._client: Any = None
        self._connecting = anyio.Lock()

    @staticmethod
    def workflow_of(invocation: Invocation) -> str:
        """The id of the workflow that runs ``invocation``: one per hosted agent and session. Sessions are
        per workspace and agent, so two agents (or workspaces) hosting one spec must not share one
        workflow for a session id they both use. Ids hold no "/": the parts cannot run into each other."""
        hosted = invocation.hosted
        return f"orchestra/{hosted.workspace}/{hosted.id}/{invocation.session_id or ''}"

    async def client(self) -> Any:
        from orchestra.temporal import connect, parse_target

        async with self._connecting:
            if self._client is None:
                assert self.config.temporal is not None
                self._client = await connect(parse_target(self.config.temporal))
            return self._client

    async def run(
        self,
        workspace: str,
        target: MultiAgentBase,
        invocation: Invocation,
        record: RunRecord,
        task: Any,
        stop: Stop,
        log: EventLog | None,
        storage: Storage,
    ) -> Any:
        """Run ``invocation`` on the workers and follow it (see the module docstring); its outcome as
        ``run_target`` gives it: the run's result, or ``Stopped``. ``storage`` holds the pipeline's
        sessions (this server's view of the keys the workers open)."""
        address = self.config.temporal or ""
        handle: Any = None
        with stop.scope():
            try:
                # A stop that comes while the workflow starts takes effect once it has a handle: else
                # the workflow would be started, and run on, with nothing left to terminate it.
                with anyio.CancelScope(shield=True):
                    handle = await self._start(workspace, invocation, record, task)
                return await self._follow(handle, target, invocation, log, storage)
            except (Refused, OrchestraError):
                raise
            except Exception as exc:
                raise _unavailable(exc, address, record.run_id) from None
        assert stop.request is not None
        if handle is None:
            return Stopped(stop.request)
        # The workers stop with the run: what they completed stays in the session, for a resume or a move.
        with anyio.CancelScope(shield=True):
            try:
                await handle.terminate(f"stopped on the server ({stop.request.mode} by {stop.request.by})")
            except Exception as exc:  # ended meanwhile, or Temporal is gone: the record says so
                return Stopped(stop.request, stored=None, note=f"its workflow was not terminated: {exc}")
            stored = await _completed_any(
                storage, invocation.session_id or "", target.scope_id, record.run_id
            )
        return Stopped(stop.request, stored=stored)

    async def _start(self, workspace: str, invocation: Invocation, record: RunRecord, task: Any) -> Any:
        """The workflow of the run: the session's running one (followed), else a new one."""
        from orchestra.temporal import (
            PipelineWorkflow,
            RunRequest,
            parse_target,
            running_handle,
            spec_hash,
            start_run,
        )

        loaded = self.config.spec_of(invocation.hosted.id)
        session_id = invocation.session_id
        assert session_id is not None  # refused at admission (RunService.admit)
        client = await self.client()
        workflow = self.workflow_of(invocation)
        handle = await running_handle(client, loaded.spec.id, session_id, workflow=workflow)
        if handle is not None:
            if invocation.responses:
                await handle.signal(PipelineWorkflow.respond, invocation.responses)
            elif invocation.prior is None and not invocation.resume:
                raise Refused(
                    409,
                    "session_busy",
                    f"a run of session {session_id} is going on on the Temporal workers (workflow "
                    f"{handle.id}): answer its interrupts, or wait for it to end",
                )
            return handle
        request = RunRequest(
            spec_id=loaded.spec.id,
            spec_hash=spec_hash(loaded),
            session_id=session_id,
            storage=storage_uri_under(self.config.storage, sessions_prefix(workspace, invocation.hosted.id)),
            task=None if invocation.resume or invocation.responses else task,
            run_id=record.run_id,
            resume=invocation.resume,
            responses=dict(invocation.responses or {}),
        )
        assert self.config.temporal is not None
        return await start_run(client, parse_target(self.config.temporal), request, workflow=workflow)

    async def _follow(
        self,
        handle: Any,
        target: MultiAgentBase,
        invocation: Invocation,
        log: EventLog | None,
        storage: Storage,
    ) -> MultiAgentResult:
        """Follow the workflow until it ends or asks a human; the run's result, read from its session."""
        from orchestra.temporal import PipelineWorkflow

        ended: list[Any] = []
        done = anyio.Event()
        events = _Progress(log, storage, invocation.session_id or "", target.scope_id)

        async def wait_for_end() -> None:
            try:
                ended.append(await handle.result())
            except Exception as exc:
                ended.append(exc)
            done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_end)
            while True:
                with anyio.move_on_after(_POLL_S):
                    await done.wait()
                try:
                    progress = await handle.query(PipelineWorkflow.progress)
                except Exception:
                    if not done.is_set():
                        raise
                    break  # the workflow's end says why, not a query of the ended workflow
                await events.send(progress)
                if done.is_set():
                    break
                interrupts = progress.get("interrupts") or []
                waits = open_waits(interrupts)
                if progress["status"] == "interrupted" and len(waits) < len(interrupts):
                    break  # a human answers (a timer or an event ends a wait by itself: followed on)
            group.cancel_scope.cancel()
        outcome = ended[0] if ended else None
        if isinstance(outcome, Exception):
            raise outcome
        if (
            isinstance(outcome, dict)
            and outcome.get("status") == "failed"
            and outcome.get("execution_count") is None
        ):
            # The workflow refused before running anything (no run to resume, another graph).
            raise OrchestraError(f"the workers refused the run: {outcome.get('reason')}")
        result = await _stored_result(target, storage, invocation.session_id or "")
        if result.status.value == "executing":
            # The workflow ended, but not in this server's view of the session: the workers wrote elsewhere.
            raise OrchestraError(
                f"the workers ended the run (workflow {handle.id}), but session {invocation.session_id} here "
                f"still shows it executing: do the workers open this server's storage ({self.config.storage})?"
            )
        return result


class _Progress:
    """Sends a followed run's progress as a local run's events: ``node_start``, then ``node_stop`` (with
    the node's output, read from the session) for each execution of a node."""

    def __init__(self, log: EventLog | None, storage: Storage, session_id: str, scope_id: str) -> None:
        self.log, self.storage, self.session_id, self.scope_id = log, storage, session_id, scope_id
        self.started: dict[str, int] = {}
        self.stopped: dict[str, int] = {}

    async def send(self, progress: dict[str, Any]) -> None:
        if self.log is None:
            return
        executions: dict[str, int] = progress.get("executions") or {}
        stopping = []
        for node_id, status in (progress.get("nodes") or {}).items():
            count = int(executions.get(node_id, 0))
            if count > self.started.get(node_id, 0) and status in ("executing", "completed", "failed"):
                self.started[node_id] = count
                self.log.append("node_start", {"node_id": node_id, "execution_count": count})
            if status in ("completed", "failed") and count > self.stopped.get(node_id, 0):
                self.stopped[node_id] = count
                stopping.append((node_id, status))
        if not stopping:
            return
        fields = await self._fields()
        for node_id, status in stopping:
            result = (fields.get(f"node/{node_id}") or {}).get("result") or {}
            output = result.get("output")
            self.log.append(
                "node_stop",
                {
                    "node_id": node_id,
                    "status": status,
                    "output": None if output is None else output_text(output),
                },
            )

    async def _fields(self) -> dict[str, Any]:
        try:
            doc = await load_scope(self.storage, self.session_id, "multiAgent", self.scope_id)
        except OrchestraError:  # not committed yet: the node's output is in the run's record at its end
            return {}
        return dict(doc.fields)


async def _completed_any(storage: Storage, session_id: str, scope_id: str, run_id: str) -> bool | None:
    """Whether the stopped run completed nodes that the session keeps: known only for a run it started
    (a resumed one goes on under the run id it resumes; the workers' records name no hosted run)."""
    try:
        doc = await load_scope(storage, session_id, "multiAgent", scope_id)
    except OrchestraError:
        return False  # not committed at all
    run = doc.fields.get("run") or {}
    if run.get("run_id") != run_id:
        return None
    return bool(run.get("execution_count"))


async def _stored_result(target: MultiAgentBase, storage: Storage, session_id: str) -> MultiAgentResult:
    """The result of the run as the workers saved it in the session (``target`` loads it)."""
    doc = await load_scope(storage, session_id, "multiAgent", target.scope_id)
    target.document.load(doc.fields, doc.logs)
    result = target.build_result()
    if result.output is None and result.execution_order:
        # A swarm on Temporal keeps its output in its last turn's result.
        last = result.results.get(result.execution_order[-1])
        result.output = last.output if last is not None else None
    return result


def _unavailable(exc: Exception, address: str, run_id: str) -> Exception:
    """What Temporal (or the way to it) answered, as one line: a 503 when it was not reached or refused,
    else the run's failure on the workers."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
    from temporalio.service import RPCError

    if isinstance(exc, WorkflowFailureError):
        cause: BaseException = exc
        while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
            cause = cause.__cause__  # the workflow's failure wraps the activity's, which says why
        return OrchestraError(f"the run failed on the Temporal workers: {str(cause).splitlines()[0]}")
    if isinstance(exc, WorkflowAlreadyStartedError):  # another server started the session's run first
        return Refused(
            409,
            "session_busy",
            f"a run of this session is going on on the Temporal workers (workflow {exc.workflow_id}): "
            "answer its interrupts, or wait for it to end",
        )
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, RPCError):
        first = f"{exc.message} ({exc.status.name})"
    return Refused(
        503,
        "temporal_unavailable",
        f"cannot run it on the Temporal workers at {address}: {first} (run {run_id}); is Temporal up?",
        retry_after=5,
    )
