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
- a session deleted here has its running workflow terminated first (``stop_session``), so no worker
  writes into the session once it is gone;
- a Temporal that cannot be reached or refuses is a 503 (``temporal_unavailable``) that says where; a
  run the workers ended that the session here does not show ended (workers on other storage) fails
  saying so; answers to a workflow that ended before they reached it are a 409 (``workflow_ended``),
  and a workflow that does not answer its progress query (no worker serves it) fails the run, naming
  the workflow: neither blames Temporal.

Temporal is reached through ``orchestra.temporal``'s ``WorkflowRuns``, which raises orchestra's own
errors (``TemporalError``); it is imported here when a run goes to workers (the config checked at start
that the extra is there), so a server without workers never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from orchestra.errors import (
    OrchestraError,
    TemporalUnavailableError,
    WorkflowBusyError,
    WorkflowFailedError,
    WorkflowRequestError,
)
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
    from orchestra.temporal import RunWorkflow, WorkflowRuns

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
        self._runs: WorkflowRuns | None = None

    @staticmethod
    def workflow_of(invocation: Invocation) -> str:
        """The id of the workflow that runs ``invocation``: one per hosted agent and session."""
        return Workers.session_workflow(
            invocation.hosted.workspace, invocation.hosted.id, invocation.session_id or ""
        )

    @staticmethod
    def session_workflow(workspace: str, agent_id: str, session_id: str) -> str:
        """The id of the workflow of a hosted agent's session. Sessions are per workspace and agent, so two
        agents (or workspaces) hosting one spec must not share one workflow for a session id they both
        use. Ids hold no "/": the parts cannot run into each other."""
        return f"orchestra/{workspace}/{agent_id}/{session_id}"

    def runs(self) -> WorkflowRuns:
        """The workflows on the config's Temporal target (one client, connected on first use)."""
        if self._runs is None:
            from orchestra.temporal import WorkflowRuns, parse_target

            assert self.config.temporal is not None
            self._runs = WorkflowRuns(parse_target(self.config.temporal))
        return self._runs

    async def stop_session(self, workspace: str, agent_id: str, session_id: str) -> bool:
        """Terminate the running workflow of a session that is being deleted; whether one ran. Terminated,
        not cancelled: a cancel lets the workflow go on (to its next command, a commit into the session)
        until it handles it, and a terminate ends it at once, so no further activity is scheduled.

        Raises:
            Refused: 503 ``temporal_unavailable``: Temporal did not answer, so the workflow may still run
                (the session is not deleted: the delete can be made again).
        """
        loaded = self.config.loaded.get(agent_id)
        if self.config.temporal is None or loaded is None or loaded.spec.kind == "agent":
            return False  # an agent's turns never run on workers
        workflow = self.session_workflow(workspace, agent_id, session_id)
        try:
            return await self.runs().stop(workflow, f"session {session_id} of {agent_id!r} was deleted")
        except TemporalUnavailableError as exc:
            raise Refused(
                503,
                "temporal_unavailable",
                f"cannot stop the workflow {workflow} of session {session_id} on the Temporal workers at "
                f"{self.config.temporal}: {exc.reason}; the session is not deleted, try again",
                retry_after=5,
            ) from None

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
        handle: RunWorkflow | None = None
        with stop.scope():
            try:
                # A stop that comes while the workflow starts takes effect once it has a handle: else
                # the workflow would be started, and run on, with nothing left to terminate it.
                with anyio.CancelScope(shield=True):
                    handle = started = await self._start(workspace, invocation, record, task)
                return await self._follow(started, target, invocation, log, storage)
            except WorkflowBusyError as exc:  # a run the request does not follow, or another server's
                raise Refused(
                    409,
                    "session_busy",
                    f"a run of session {invocation.session_id} is going on on the Temporal workers "
                    f"(workflow {exc.workflow_id}): answer its interrupts, or wait for it to end",
                ) from None
            except WorkflowFailedError as exc:
                raise OrchestraError(f"the run failed on the Temporal workers: {exc}") from None
            except WorkflowRequestError as exc:  # Temporal is up: the workflow did not answer
                raise OrchestraError(
                    f"cannot follow the run on the Temporal workers: {exc}; it may still run there"
                ) from None
            except TemporalUnavailableError as exc:
                raise Refused(
                    503,
                    "temporal_unavailable",
                    f"cannot run it on the Temporal workers at {self.config.temporal}: {exc.reason} "
                    f"(run {record.run_id}); is Temporal up?",
                    retry_after=5,
                ) from None
        assert stop.request is not None
        if handle is None:
            return Stopped(stop.request)
        # The workers stop with the run: what they completed stays in the session, for a resume or a move.
        with anyio.CancelScope(shield=True):
            try:
                await handle.terminate(f"stopped on the server ({stop.request.mode} by {stop.request.by})")
            except OrchestraError as exc:  # Temporal is gone: the record says so
                return Stopped(stop.request, stored=None, note=f"its workflow was not terminated: {exc}")
            stored = await _completed_any(
                storage, invocation.session_id or "", target.scope_id, record.run_id
            )
        return Stopped(stop.request, stored=stored)

    async def _start(
        self, workspace: str, invocation: Invocation, record: RunRecord, task: Any
    ) -> RunWorkflow:
        """The workflow of the run: the session's running one (followed), else a new one."""
        from orchestra.temporal import RunRequest, spec_hash

        loaded = self.config.spec_of(invocation.hosted.id)
        session_id = invocation.session_id
        assert session_id is not None  # refused at admission (RunService.admit)
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
        # A run taken over from a gone server, or a resume, follows the running workflow.
        join = invocation.prior is not None or invocation.resume
        try:
            return await self.runs().start_or_join(request, workflow=self.workflow_of(invocation), join=join)
        except WorkflowRequestError as exc:  # it ended between the look and the answers
            raise Refused(
                409,
                "workflow_ended",
                f"the workflow {exc.workflow_id} of session {session_id} ended before the answers reached "
                f"it ({exc.reason}): nothing was answered; see how the run ended, then resume the session",
            ) from None

    async def _follow(
        self,
        handle: RunWorkflow,
        target: MultiAgentBase,
        invocation: Invocation,
        log: EventLog | None,
        storage: Storage,
    ) -> MultiAgentResult:
        """Follow the workflow until it ends or asks a human; the run's result, read from its session."""
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
                    progress = await handle.progress()
                except OrchestraError:
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
