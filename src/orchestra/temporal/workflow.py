"""The pipeline workflow: orchestra's own scheduling decisions, with every node run as an activity.

The workflow builds a *skeleton* of the Graph or Swarm (``from_structure``: the same nodes, edges and
limits with stand-in executors) and drives its scheduler (``GraphScheduler``, ``SwarmScheduler``,
``MapScheduler``) through the very methods the local runner uses: ``begin``, ``next``, ``start``,
``complete`` (``end_turn`` for swarms), ``finish``. A scheduler does no I/O and reads no clock, so the
workflow stays deterministic; it reads and changes the run only through the skeleton's run document. Each node runs in an activity
with retries (a worker that dies costs a retry of that node only); after each node the workflow commits
the run to the session journal through a local activity (it runs beside the workflow, one at a time, so
the journal keeps a single writer), so ``orchestra sessions show`` and the dashboard see Temporal runs
as they see local ones. An interrupt waits for a ``respond`` signal; a wait for its time (a workflow
timer) or its event (the ``send_event`` signal), see ``_waits.py``.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orchestra.budget import Budget
    from orchestra.interrupts import Interrupt
    from orchestra.multiagent import (
        Graph,
        GraphScheduler,
        Map,
        MapScheduler,
        MultiAgentBase,
        NodeResult,
        Status,
        Swarm,
        SwarmScheduler,
    )
    from orchestra.temporal._commits import commit_key, commit_version
    from orchestra.temporal._types import (
        WORKFLOW_NAME,
        CommitRequest,
        NodeOutcome,
        NodeRequest,
        RunRequest,
        StateRequest,
        unpack,
    )
    from orchestra.temporal._waits import WorkflowWaits, all_waits
    from orchestra.temporal.budgets import plus
    from orchestra.waits import is_wait_answer

__all__ = ["PipelineWorkflow"]

_LIGHT = timedelta(seconds=60)
_NODE_RETRIES = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(milliseconds=200))
_COMMIT_RETRIES = RetryPolicy(maximum_attempts=20, initial_interval=timedelta(milliseconds=200))
_UNFINISHED = ("executing", "failed", "interrupted")
_BATCH_COMMITS = "commit-batches"  # workflow.patched: see _run_graph
# Runs recorded before the schedulers were shared with the local runner went on after a budget stopped a
# node, and a sticky swarm's next run started at the entry point with a blank shared context: histories
# recorded then replay that way (see _budget_stops, _run_swarm).
_BUDGET_STOPS = "budget-stops"
_STICKY_SWARMS = "sticky-swarms"
# Continue-as-new when the spec does not say (its ``temporal: {continue_as_new: ...}``): far below
# Temporal's 51,200 events and 50 MB, so that the nodes running when the threshold is crossed (a wide
# fan-out, a map's running items) finish within the same history.
_MAX_EVENTS = 10_000
_MAX_BYTES = 10_000_000
_NESTED_MAPS = "nested-maps"  # workflow.patched: see _run_items
_SHIELDED_COMMITS = "shielded-commits"  # workflow.patched: see _commit
_AFTER_COMMIT = "node-after-commit-version"  # workflow.patched: see _commit_now
_CONTINUE = "continue"  # a map node's outcome when it stopped taking items for a continue-as-new


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class PipelineWorkflow:
    """Runs (or resumes) one pipeline run of one session."""

    def __init__(self) -> None:
        self._orchestrator: MultiAgentBase | None = None
        self._responses: dict[str, Any] | None = None
        self._request: RunRequest | None = None
        self._settings: dict[str, Any] = {}  # the spec's temporal: section
        self._commits = 0  # numbers this workflow run's commits (CommitRequest.commit_id)
        self._version = ""  # the version of the last commit begun (CommitRequest.version)
        self._saved = ""  # the key of the last commit saved: what a node scheduled now depends on
        # Map nodes commit their items while other nodes run: one commit at a time keeps one writer.
        self._commit_lock = asyncio.Lock()
        # Continue-as-new: set once the history crossed its threshold; no node or item starts after it.
        self._continuing = False
        self._progressed = False  # a node (or item) ended in this workflow run: a new one would move on
        self._paused_map = False  # a map stopped taking items for the continue-as-new
        self._metered = False  # the run or one of its nodes has a budget
        self._base_s = 0.0  # the run's time before this invocation (a budget's wall_seconds)
        self._started: Any = None
        self._waits = WorkflowWaits()
        # Each log as last committed (the document's list, and its length then): a commit sends what was
        # appended since. The document appends to a log in place, and replaces it to change it otherwise.
        self._committed_logs: dict[str, tuple[Any, int]] = {}

    @workflow.signal
    def respond(self, responses: dict[str, Any]) -> None:
        """Answer the run's open interrupts: ``{interrupt id: response}``."""
        self._responses = dict(responses)

    @workflow.signal
    def send_event(self, event: dict[str, Any]) -> None:
        """An event for the run's waits: ``{"name", "payload", "key"}`` (docs/waiting.md)."""
        self._waits.send(event)

    @workflow.query
    def progress(self) -> dict[str, Any]:
        """The run's status and every node's status, for ``orchestra run`` to follow."""
        orchestrator = self._orchestrator
        if orchestrator is None:  # a run continued as new is still executing while it reads itself back
            pending = "executing" if self._request is not None and self._request.continued else "pending"
            return {"status": pending, "nodes": {}, "interrupts": []}
        records = {n: orchestrator.document.node(n) or {} for n in orchestrator.nodes}
        nodes = {n: record.get("status", "pending") for n, record in records.items()}
        executions = {n: record.get("executions", 0) for n, record in records.items()}
        seconds = {
            n: ((record.get("result") or {}).get("execution_time_ms") or 0.0) / 1000
            for n, record in records.items()
        }
        run = orchestrator.run
        return {
            "status": run["status"],
            "reason": run.get("reason"),
            "nodes": nodes,
            "executions": executions,
            "seconds": seconds,
            "interrupts": run.get("interrupts", []),
        }

    @workflow.run
    async def run(self, request: RunRequest) -> dict[str, Any]:
        self._request = request
        if request.inbox:  # a continued run: the events its waits have not taken yet
            self._waits.inbox = request.inbox
        structure: dict[str, Any] = unpack(
            await workflow.execute_local_activity(
                "orchestra.describe",
                request.spec_id,
                start_to_close_timeout=_LIGHT,
                retry_policy=_COMMIT_RETRIES,
            )
        )
        skeleton: MultiAgentBase = (
            Graph.from_structure(structure)
            if structure["kind"] == "graph"
            else Swarm.from_structure(structure)
        )
        self._orchestrator = skeleton
        self._settings = structure.get("temporal") or {}
        saved = unpack(
            await workflow.execute_local_activity(
                "orchestra.load_state",
                StateRequest(request.spec_id, request.session_id, request.storage, skeleton.scope_id),
                start_to_close_timeout=_LIGHT,
                retry_policy=_COMMIT_RETRIES,
            )
        )
        document = skeleton.document
        if saved is not None:
            document.load(saved["fields"], saved["logs"])
            self._committed_logs = {
                name: (document.log(name), len(document.log(name))) for name in saved["logs"]
            }
        responses = dict(request.responses)
        fresh = skeleton.status.value not in _UNFINISHED and not request.continued
        if request.continued:  # the same run, read back from the session: its status does not change
            pass
        elif not fresh:
            if not skeleton.same_topology(skeleton.run.get("topology")) and not request.force:
                return {
                    "status": "failed",
                    "reason": "the saved run was made by a different graph; resume with --force",
                }
            document.update_run(status=Status.EXECUTING.value, reason=None, error=None, interrupts=[])
        else:
            if request.task is None and not request.task_ref:
                return {"status": "failed", "reason": f"{skeleton.kind} {skeleton.id!r} has no run to resume"}
            skeleton.start_fresh(request.task, run_id=request.run_id or workflow.info().workflow_id)
        # After start_fresh, which resets the run record: it shows the limits in effect, as locally.
        self._set_budgets(skeleton, structure.get("budgets"), request.budget)
        # The session shows the run (its task, its status) from the start; a fresh run starts from the
        # spec's state, as locally (the nodes' changes merge into it).
        await self._commit(
            skeleton,
            initial_state=skeleton.state.to_dict() if fresh else None,
            task_ref=request.task_ref if fresh else None,
        )
        started = datetime.fromtimestamp(request.started_at, UTC) if request.started_at else workflow.now()
        self._started = started
        while True:
            if self._continuing:  # answers came to a run past its threshold: the next run goes on
                await self._continue_as_new(skeleton, responses, started, [])
            scheduler: GraphScheduler | SwarmScheduler
            if isinstance(skeleton, Graph):
                scheduler = skeleton.scheduler()
                await self._run_graph(skeleton, scheduler, responses, started)
            else:
                assert isinstance(skeleton, Swarm)
                scheduler = skeleton.scheduler()
                await self._run_swarm(skeleton, scheduler, responses, started)
            if self._continuing and scheduler.may_start and self._left_to_run(skeleton, scheduler):
                ready = list(scheduler.ready) if isinstance(scheduler, GraphScheduler) else []
                await self._continue_as_new(skeleton, responses, started, ready)
            scheduler.finish()
            ended = not scheduler.interrupts or scheduler.failure is not None
            # A run that ended needs its invocation state no more (a resume starts with its own).
            done_with = [request.invocation_state_ref] if ended and request.invocation_state_ref else []
            await self._commit(skeleton, delete=done_with, ends_run=ended)
            if ended:
                break
            # Human in the loop: wait for the answers as a signal, then go on where the run stopped. Waits
            # end by themselves (a timer, an event signal: _waits.py); their answers stay for the run.
            self._responses = None
            kept = {i: answer for i, answer in responses.items() if is_wait_answer(answer)}
            waits = all_waits(skeleton.run.get("interrupts", []))
            if waits:
                responses = {**kept, **await self._waits.answers(waits, lambda: self._responses)}
            else:
                await workflow.wait_condition(lambda: self._responses is not None)
                responses = {**kept, **(self._responses or {})}
            document.update_run(status=Status.EXECUTING.value, reason=None, interrupts=[])
        run = skeleton.run
        return {
            "status": run["status"],
            "reason": run.get("reason"),
            "error": run.get("error"),
            "execution_order": list(document.log("execution_order")),
            "usage": run.get("usage"),
            "execution_count": run.get("execution_count"),
        }

    # -- budgets ----------------------------------------------------------------------------------------

    def _set_budgets(
        self, skeleton: MultiAgentBase, budgets: dict[str, Any] | None, override: dict[str, Any] | None
    ) -> None:
        """The skeleton gets the run's budget (``override``: the one the run was started with, else the
        spec's) and its nodes' own, so that its scheduler stops the run before a node it cannot afford."""
        budgets = budgets or {}
        run_budget = override or budgets.get("run")
        if run_budget:
            skeleton.budget = Budget.from_json(run_budget)
            limits = dict(run_budget)
            limits.pop("prices", None)
            skeleton.document.update_run(budget=limits)  # the limits in effect, as locally
        for node_id, budget in (budgets.get("nodes") or {}).items():
            skeleton.nodes[node_id].budget = Budget.from_json(budget)
        self._metered = bool(run_budget or budgets.get("nodes"))
        self._base_s = float(skeleton.run.get("execution_time_ms") or 0) / 1000

    def _elapsed(self) -> float | None:
        """The run's time so far (across resumes), for budgets; None for a run without one."""
        if not self._metered:
            return None
        return float(self._base_s + (workflow.now() - self._started).total_seconds())

    def _charge(self, orchestrator: MultiAgentBase, node_id: str, outcome: NodeOutcome) -> None:
        """What a node spent, charged to the run and to the node (committed with the run)."""
        if not outcome.spent:
            return
        document = orchestrator.document
        document.update_run(spent=plus(orchestrator.run.get("spent"), outcome.spent))
        node_spent = (document.peek(node_id) or {}).get("spent")
        document.update_node(node_id, spent=plus(node_spent, outcome.spent))

    # -- continue-as-new --------------------------------------------------------------------------------

    def _should_continue(self) -> bool:
        """Whether the history is near its threshold (checked between nodes): then no node starts, the
        running ones finish and commit, and the workflow continues as new. A workflow run that has not
        moved the run on yet never does, so that a threshold below what reading the run back costs does
        not loop."""
        if self._continuing:
            return True
        if not self._progressed:
            return False
        request = self._request
        assert request is not None
        limits = self._settings.get("continue_as_new") or {}
        events = request.max_history_events or limits.get("max_events") or _MAX_EVENTS
        size = request.max_history_bytes or limits.get("max_bytes") or _MAX_BYTES
        info = workflow.info()
        self._continuing = (
            info.get_current_history_length() >= events
            or info.get_current_history_size() >= size
            or info.is_continue_as_new_suggested()
        )
        return self._continuing

    def _left_to_run(self, skeleton: MultiAgentBase, scheduler: GraphScheduler | SwarmScheduler) -> bool:
        """Whether the run has anything left when it stopped for a continue-as-new (else it just ends)."""
        if isinstance(scheduler, SwarmScheduler):
            return skeleton.document.field("next") is not None
        return bool(scheduler.ready) or self._paused_map

    async def _continue_as_new(
        self, skeleton: MultiAgentBase, responses: dict[str, Any], started: Any, ready: list[str]
    ) -> None:
        """Hand the run to a new workflow run of the same id, carrying references only: the session holds
        the run (every node that ended is committed; a map that was stopped goes on with the items it
        has not run), and the new run reads it back. Answers that arrived by signal go with it."""
        request = self._request
        assert request is not None
        for node_id in ready:  # a node taken up again (a stopped map) is queued in memory only: save that
            if not skeleton.document.record(node_id).get("queued"):
                skeleton.document.update_node(node_id, queued=True)
        await self._commit(skeleton)  # what the last nodes changed (the run's position)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._responses is not None:  # a signal that came during the handover
            responses = {**responses, **self._responses}
        workflow.continue_as_new(
            replace(
                request,
                task=None,
                task_ref="",
                resume=True,
                responses=responses,
                continued=request.continued + 1,
                inbox=self._waits.inbox,  # events sent before their wait began go on with the run
                started_at=started.timestamp(),
            )
        )

    # -- running nodes ----------------------------------------------------------------------------------

    def _node_request(self, orchestrator: MultiAgentBase, node_id: str, **options: Any) -> NodeRequest:
        request = self._request
        assert request is not None
        record = orchestrator.document.record(node_id)
        return NodeRequest(
            spec_id=request.spec_id,
            session_id=request.session_id,
            storage=request.storage,
            scope_id=orchestrator.scope_id,
            run_id=str(orchestrator.run.get("run_id")),
            node_id=node_id,
            execution_count=record["executions"],
            invocation_state=request.invocation_state,
            invocation_state_ref=request.invocation_state_ref,
            spec_hash=request.spec_hash,
            budget=orchestrator.budget.to_json() if self._metered and orchestrator.budget else None,
            elapsed_s=self._elapsed() or 0.0,
            **options,
        )

    async def _execute(
        self, orchestrator: MultiAgentBase, request: NodeRequest, node_timeout: float | None
    ) -> NodeOutcome:
        assert self._request is not None
        if self._saved:  # every commit the node depends on is saved, this one last (see _commit_now)
            request = replace(request, after_commit=self._saved)
        try:
            outcome: NodeOutcome = await workflow.execute_activity(
                "orchestra.execute_node",
                request,
                result_type=NodeOutcome,
                # The activity enforces node_timeout itself (a final failure); this only catches a worker
                # that stopped answering without its heartbeat noticing.
                start_to_close_timeout=timedelta(seconds=node_timeout + 60 if node_timeout else 24 * 3600),
                heartbeat_timeout=timedelta(
                    seconds=self._settings.get("heartbeat_seconds") or self._request.heartbeat_seconds
                ),
                retry_policy=self._node_retries(orchestrator, request.node_id),
            )
        except ActivityError as exc:
            cause = exc.cause or exc
            return NodeOutcome(status="failed", blob="", error=f"{type(cause).__name__}: {cause}")
        return outcome

    def _node_retries(self, orchestrator: MultiAgentBase, node_id: str) -> RetryPolicy:
        """The activity's retries: the spec's ``temporal: {retry: ...}`` (infrastructure failures), or the
        default; for a node with a retry policy of its own, that policy's intervals, with its attempts
        on top of the infrastructure's (the activity decides which failures it retries: see
        ``PipelineActivities._retry``)."""
        retry = self._settings.get("retry")
        infra = _NODE_RETRIES
        if retry:  # (a history recorded before the setting existed has none)
            maximum = retry.get("maximum_interval")
            infra = RetryPolicy(
                maximum_attempts=retry["maximum_attempts"],
                initial_interval=timedelta(seconds=retry["initial_interval"]),
                backoff_coefficient=retry["backoff_coefficient"],
                maximum_interval=timedelta(seconds=maximum) if maximum else None,
            )
        policy = orchestrator.nodes[node_id].retry
        if policy is None:
            return infra
        return RetryPolicy(
            maximum_attempts=policy.max_attempts + infra.maximum_attempts - 1,
            initial_interval=timedelta(seconds=max(policy.initial_interval, 0.001)),
            backoff_coefficient=policy.backoff,
            maximum_interval=timedelta(seconds=policy.max_interval) if policy.max_interval else None,
        )

    @staticmethod
    def _result(node_id: str, outcome: NodeOutcome, execution_count: int) -> NodeResult:
        return NodeResult(
            node_id=node_id,
            status=Status(outcome.status),
            error=outcome.error,
            usage=outcome.usage,
            execution_time_ms=outcome.execution_time_ms,
            execution_count=execution_count,
            interrupts=[Interrupt.model_validate(i) for i in outcome.interrupts],
        )

    async def _commit(
        self,
        orchestrator: MultiAgentBase,
        node_id: str | None = None,
        blob: str | None = None,
        initial_state: dict[str, Any] | None = None,
        task_ref: str | None = None,
        batch: list[list[str]] | None = None,
        delete: list[str] | None = None,
        ends_run: bool = False,
        map_list: list[str] | None = None,
        map_items: list[list[Any]] | None = None,
    ) -> None:
        async def locked() -> None:
            async with self._commit_lock:
                await self._commit_now(
                    orchestrator,
                    node_id,
                    blob,
                    initial_state,
                    task_ref,
                    batch,
                    delete,
                    ends_run,
                    map_list,
                    map_items,
                )

        # A commit has taken the document's changes when it starts, and commits are one at a time: one
        # whose task is cancelled (its map's, when a join held, an item or node failed, or time ran out)
        # finishes, holding the lock, before the next one starts. (Here the SDK lets a cancelled local
        # activity run on, so without this the next commit could start beside it.)
        if workflow.patched(_SHIELDED_COMMITS):
            await asyncio.shield(locked())
        else:
            await locked()

    async def _commit_now(
        self,
        orchestrator: MultiAgentBase,
        node_id: str | None,
        blob: str | None,
        initial_state: dict[str, Any] | None,
        task_ref: str | None,
        batch: list[list[str]] | None,
        delete: list[str] | None,
        ends_run: bool,
        map_list: list[str] | None,
        map_items: list[list[Any]] | None,
    ) -> None:
        request = self._request
        assert request is not None
        self._commits += 1
        fresh = initial_state is not None  # a fresh run's first commit
        # The agents a fresh run resets (``start_fresh``, as locally) lose their saved state; their
        # activities then start them as built. The skeleton's stand-ins hold nothing worth saving. A
        # swarm whose agents keep their own history across runs (``history: private``) resets none.
        keeps = isinstance(orchestrator, Swarm) and orchestrator.history == "private"
        reset = fresh and not keeps
        fields, logs, unset = orchestrator.document.take_changes(include_agents=reset)
        if fresh:
            fields["state"] = initial_state
        if reset:
            for name in [name for name in fields if name.startswith("agent/")]:
                del fields[name]
                unset.append(name)
            for name in [name for name in logs if name.startswith("agent/")]:
                logs[name] = []
        log_from: dict[str, int] = {}
        for name, items in list(logs.items()):
            committed, length = self._committed_logs.get(name, (None, 0))
            if committed is items and len(items) >= length:
                logs[name], log_from[name] = items[length:], length
            self._committed_logs[name] = (items, len(items))
        kind = orchestrator.nodes[node_id].kind if node_id else None
        commit = CommitRequest(
            request.session_id,
            request.storage,
            orchestrator.scope_id,
            fields,
            logs,
            unset,
            node_id,
            kind,
            blob or None,
            task_ref or None,
            str(orchestrator.run.get("run_id") or ""),
            batch or [],
            f"{workflow.info().run_id}/{self._commits}",
            delete or [],
            ends_run,
            map_list or [],
            map_items or [],
            log_from,
        )
        # Each commit's version (what it and the commits before it hold) goes with it, and its key to the
        # nodes scheduled after it is saved (``_execute``): a worker whose copy of the run holds that
        # version reads nothing for them. Histories recorded before scheduled nodes without it.
        if workflow.patched(_AFTER_COMMIT):
            self._version = commit.version = commit_version(self._version, commit)
        await workflow.execute_local_activity(
            "orchestra.commit", commit, start_to_close_timeout=_LIGHT, retry_policy=_COMMIT_RETRIES
        )
        self._saved = commit_key(commit.commit_id, commit.version)

    def _remaining(self, limit: float | None, started: Any) -> float | None:
        if limit is None:
            return None
        elapsed: float = (workflow.now() - started).total_seconds()
        return limit - elapsed

    @staticmethod
    def _budget_stops(scheduler: GraphScheduler | SwarmScheduler) -> None:
        """A budget stopped a node: the run stops (resumable), as it does locally; a history recorded
        before that went on."""
        if scheduler.stopped is not None and not workflow.patched(_BUDGET_STOPS):
            scheduler.stopped = None

    async def _run_graph(
        self, graph: Graph, scheduler: GraphScheduler, responses: dict[str, Any], started: Any
    ) -> None:
        document = graph.document
        scheduler.begin()
        limit = graph.max_concurrency or math.inf
        running: dict[asyncio.Task[NodeOutcome], str] = {}
        while True:
            while (
                len(running) < limit
                and not self._should_continue()
                and (node_id := scheduler.next(self._elapsed())) is not None
            ):
                record = document.record(node_id)
                reset = graph.reset_on_revisit and record["executions"] >= 1
                scheduler.start(node_id, {})
                request = self._node_request(
                    graph,
                    node_id,
                    activation=list(record.get("activation") or []),
                    reset=reset,
                    responses=responses,  # the task is not copied into every node's input: the activity
                )  # reads it from the session, where the first commit stored it
                if graph.nodes[node_id].kind == "map":
                    task = asyncio.ensure_future(self._run_map(graph, request))
                else:
                    task = asyncio.ensure_future(self._execute(graph, request, graph.node_timeout))
                running[task] = node_id
            if not running:
                break
            remaining = self._remaining(graph.execution_timeout, started)
            done, _ = await workflow.wait(
                list(running),
                timeout=max(remaining, 0) if remaining is not None else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                scheduler.fail(f"execution_timeout ({graph.execution_timeout:g}s) exceeded")
                for task in running:
                    task.cancel()
                break
            # Nodes that finished together are committed together, in the order they started (one
            # journal record, not one per node). Histories recorded before keep one commit per node.
            batched = workflow.patched(_BATCH_COMMITS)
            finished = [task for task in running if task in done] if batched else list(done)
            batch: list[list[str]] = []
            for task in finished:
                node_id = running.pop(task)
                outcome = task.result()
                if outcome.status == _CONTINUE:  # a map that stopped for a continue-as-new: it goes on there
                    self._paused_map = True
                    continue
                self._progressed = True
                self._charge(graph, node_id, outcome)
                result = self._result(node_id, outcome, document.record(node_id)["executions"])
                # Conditions were evaluated where the node ran: the activity says which edges fired.
                scheduler.complete(result, {}, fired=outcome.fired)
                self._budget_stops(scheduler)
                if batched:
                    batch.append([node_id, outcome.blob])
                else:
                    await self._commit(graph, node_id, outcome.blob)
            if batch:
                await self._commit(graph, batch=batch)
            if scheduler.failure is not None:
                for task in running:
                    task.cancel()
                running.clear()
                break

    async def _run_map(self, graph: Graph, request: NodeRequest) -> NodeOutcome:
        """A map node as activities: save its list ("expand"), run each item that has no result yet (at
        most ``max_concurrency`` at once; items that finish together are committed together), then its
        result ("finish"). Items that completed before a worker died, or before a resume, never run
        again; the node's outcome is the finish's (or the failure of an item). A nested map's items are
        activities too (``_run_nested_item``)."""
        spec: Map = graph.nodes[request.node_id].executor
        ended = await self._run_items(graph, request, request.node_id, spec)
        if ended is not None:
            if ended.status == "stopped":  # a budget: the run stops (resumable), as locally
                return replace(ended, status="interrupted")
            return ended
        return await self._execute(graph, replace(request, map_phase="finish"), graph.node_timeout)

    async def _run_items(self, graph: Graph, request: NodeRequest, key: str, spec: Map) -> NodeOutcome | None:
        """Run map ``key``'s items until its join holds (None), or until one ends it: an item failed
        or was interrupted, a budget stopped it, or a continue-as-new. ``MapScheduler`` decides, under
        ``key`` (the node's id, or ``<node>:<index>`` for a nested map), as locally."""
        node_id = request.node_id
        map_request = replace(request, map_key="" if key == node_id else key)
        items = MapScheduler(graph.document, key)
        if items.started is None:
            expand = replace(map_request, map_phase="expand")
            expanded = await self._execute(graph, expand, graph.node_timeout)
            if expanded.status != "expanded":
                return expanded
            items.begin(spec, count=expanded.map_count)
            await self._commit(graph, map_list=[key, expanded.blob])
        else:
            items.begin(spec)
        # A map of maps: each item is a map whose items are activities of their own (histories recorded
        # before ran an item's nested map inside its activity).
        nested = isinstance(spec.node, Map) and workflow.patched(_NESTED_MAPS)
        limit = spec.max_concurrency or math.inf
        running: dict[asyncio.Task[NodeOutcome], int] = {}
        while not items.joined and items.failure is None:
            while (
                len(running) < limit and not self._should_continue() and (index := items.take()) is not None
            ):
                if nested:
                    task = asyncio.ensure_future(
                        self._run_nested_item(graph, map_request, key, index, spec.node)
                    )
                else:
                    item = replace(map_request, map_phase="item", map_item=index)
                    task = asyncio.ensure_future(self._execute(graph, item, graph.node_timeout))
                running[task] = index
            if not running:
                break
            finished, _ = await workflow.wait(list(running), return_when=asyncio.FIRST_COMPLETED)
            batch: list[list[Any]] = []
            for task in [task for task in running if task in finished]:  # in the order they started
                index = running.pop(task)
                outcome = task.result()
                if outcome.status == _CONTINUE:  # its nested map stopped for a continue-as-new
                    continue
                self._progressed = True
                self._charge(graph, node_id, outcome)  # an item's model calls count, as locally
                record: dict[str, Any] = {"status": outcome.status, "usage": outcome.usage}
                if outcome.error:
                    record["error"] = outcome.error
                # The item's own record (its output) is in its blob, folded in by the commit.
                items.settle(index, record, interrupts=outcome.interrupts, joined=outcome.join_done)
                if outcome.blob and outcome.status != "stopped":
                    batch.append([key, index, outcome.blob])
            await self._commit(graph, map_items=batch)
            if items.interrupts and not running:
                break
        for task in running:  # the join holds, or an item failed: the others are not needed
            task.cancel()
        if items.failure is not None:
            return NodeOutcome(status="failed", blob="", error=items.failure)
        if items.stopped is not None and not items.joined:
            return NodeOutcome(status="stopped", blob="", error=items.stopped)
        if items.interrupts:
            asked = [i.model_dump(mode="json") for i in items.interrupts]
            return NodeOutcome(status="interrupted", blob="", interrupts=asked)
        if self._continuing and not items.joined:
            return NodeOutcome(status=_CONTINUE, blob="")  # the items not run yet go on in the next run
        return None

    async def _run_nested_item(
        self, graph: Graph, request: NodeRequest, key: str, index: int, spec: Map
    ) -> NodeOutcome:
        """Item ``index`` of map ``key`` when it is a map itself: its own items, each an activity (so
        each is durable), under ``<key>:<index>``; then its "finish" gives the item's result."""
        inner = f"{key}:{index}"
        ended = await self._run_items(graph, request, inner, spec)
        if ended is not None:
            return ended
        done = MapScheduler(graph.document, inner).completed()
        finish = replace(request, map_phase="finish", map_key=inner, map_done=done)
        return await self._execute(graph, finish, graph.node_timeout)

    async def _run_swarm(
        self, swarm: Swarm, scheduler: SwarmScheduler, responses: dict[str, Any], started: Any
    ) -> None:
        document = swarm.document
        if (
            "next" not in document
            and (scheduler.first_agent() != swarm.entry_point or "shared_context" in document)
            and not workflow.patched(_STICKY_SWARMS)
        ):
            # A sticky swarm's new run, in a history recorded before it started where the last one ended.
            document.set("next", {"node": swarm.entry_point, "input": None, "from": None})
            document.set("shared_context", {})
        scheduler.begin()
        while not self._should_continue() and (node_id := scheduler.next()) is not None:
            remaining = self._remaining(swarm.execution_timeout, started)
            if remaining is not None and remaining <= 0:
                scheduler.fail(f"execution_timeout ({swarm.execution_timeout:g}s) exceeded")
                break
            if not scheduler.check_limits(node_id):
                break
            elapsed = self._elapsed()
            if elapsed is not None and (spent := scheduler.budget_stop(node_id, elapsed)) is not None:
                scheduler.stop(str(spent))  # as locally: before the turn it cannot afford
                break
            activation = document.field("next")
            node_input = scheduler.start(node_id, {})
            # The activity composes the turn's prompt from the saved run (the task stays out of the history).
            request = self._node_request(swarm, node_id, swarm_next=activation, responses=responses)
            outcome = await self._execute(swarm, request, swarm.node_timeout)
            result = self._result(node_id, outcome, node_input.execution_count)
            self._charge(swarm, node_id, outcome)
            scheduler.end_turn(result, outcome.handoff)
            self._budget_stops(scheduler)
            await self._commit(swarm, node_id, outcome.blob)
            self._progressed = True
