"""The pipeline workflow: orchestra's own scheduling decisions, with every node run as an activity.

The workflow builds a *skeleton* of the Graph or Swarm (``from_structure``: the same nodes, edges and
limits with stand-in executors) and drives it with the very methods a local run uses (``_start_node``,
``_apply_edges``, ``_queue_ready``, ``_limit_reached``; ``_begin_turn``, ``_end_turn`` for swarms). Those
methods do no I/O and read no clock, so the workflow stays deterministic. Each node runs in an activity
with retries (a worker that dies costs a retry of that node only); after each node the workflow commits
the run to the session journal through a local activity (it runs beside the workflow, one at a time, so
the journal keeps a single writer), so ``orchestra sessions show`` and the dashboard see Temporal runs
as they see local ones. An interrupt waits for a ``respond`` signal.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orchestra.interrupts import Interrupt
    from orchestra.multiagent import Graph, Map, MultiAgentBase, NodeResult, Status, Swarm
    from orchestra.multiagent import map as maps
    from orchestra.temporal._types import (
        WORKFLOW_NAME,
        CommitRequest,
        NodeOutcome,
        NodeRequest,
        RunRequest,
        StateRequest,
    )

__all__ = ["PipelineWorkflow"]

_LIGHT = timedelta(seconds=60)
_NODE_RETRIES = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(milliseconds=200))
_COMMIT_RETRIES = RetryPolicy(maximum_attempts=20, initial_interval=timedelta(milliseconds=200))
_UNFINISHED = ("executing", "failed", "interrupted")
_BATCH_COMMITS = "commit-batches"  # workflow.patched: see _run_graph


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class PipelineWorkflow:
    """Runs (or resumes) one pipeline run of one session."""

    def __init__(self) -> None:
        self._orchestrator: MultiAgentBase | None = None
        self._responses: dict[str, Any] | None = None
        self._request: RunRequest | None = None
        self._settings: dict[str, Any] = {}  # the spec's temporal: section
        self._commits = 0  # numbers this workflow run's commits (CommitRequest.commit_id)
        # Map nodes commit their items while other nodes run: one commit at a time keeps one writer.
        self._commit_lock = asyncio.Lock()

    @workflow.signal
    def respond(self, responses: dict[str, Any]) -> None:
        """Answer the run's open interrupts: ``{interrupt id: response}``."""
        self._responses = dict(responses)

    @workflow.query
    def progress(self) -> dict[str, Any]:
        """The run's status and every node's status, for ``orchestra run`` to follow."""
        orchestrator = self._orchestrator
        if orchestrator is None:
            return {"status": "pending", "nodes": {}, "interrupts": []}
        records = {n: orchestrator._fields.get(f"node/{n}") or {} for n in orchestrator.nodes}
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
        structure: dict[str, Any] = await workflow.execute_local_activity(
            "orchestra.describe", request.spec_id, start_to_close_timeout=_LIGHT, retry_policy=_COMMIT_RETRIES
        )
        skeleton: MultiAgentBase = (
            Graph.from_structure(structure)
            if structure["kind"] == "graph"
            else Swarm.from_structure(structure)
        )
        self._orchestrator = skeleton
        self._settings = structure.get("temporal") or {}
        saved = await workflow.execute_local_activity(
            "orchestra.load_state",
            StateRequest(request.spec_id, request.session_id, request.storage, skeleton.scope_id),
            start_to_close_timeout=_LIGHT,
            retry_policy=_COMMIT_RETRIES,
        )
        if saved is not None:
            skeleton.load_document(saved["fields"], saved["logs"])
        responses = dict(request.responses)
        fresh = skeleton.status.value not in _UNFINISHED
        if not fresh:
            if not skeleton.same_topology(skeleton.run.get("topology")) and not request.force:
                return {
                    "status": "failed",
                    "reason": "the saved run was made by a different graph; resume with --force",
                }
            skeleton._update_run(status=Status.EXECUTING.value, reason=None, error=None, interrupts=[])
        else:
            if request.task is None and not request.task_ref:
                return {"status": "failed", "reason": f"{skeleton.kind} {skeleton.id!r} has no run to resume"}
            skeleton._start_fresh_document(request.task, run_id=request.run_id or workflow.info().workflow_id)
        # The session shows the run (its task, its status) from the start; a fresh run starts from the
        # spec's state, as locally (the nodes' changes merge into it).
        await self._commit(
            skeleton,
            initial_state=skeleton.state.to_dict() if fresh else None,
            task_ref=request.task_ref if fresh else None,
        )
        started = workflow.now()
        while True:
            if isinstance(skeleton, Graph):
                failure, interrupts = await self._run_graph(skeleton, responses, started)
            else:
                assert isinstance(skeleton, Swarm)
                failure, interrupts = await self._run_swarm(skeleton, responses, started)
            skeleton._conclude(failure, interrupts)
            ended = not interrupts or failure is not None
            # A run that ended needs its invocation state no more (a resume starts with its own).
            done_with = [request.invocation_state_ref] if ended and request.invocation_state_ref else []
            await self._commit(skeleton, delete=done_with, ends_run=ended)
            if ended:
                break
            # Human in the loop: wait for the answers as a signal, then go on where the run stopped.
            self._responses = None
            await workflow.wait_condition(lambda: self._responses is not None)
            responses = dict(self._responses or {})
            skeleton._update_run(status=Status.EXECUTING.value, reason=None, interrupts=[])
        run = skeleton.run
        return {
            "status": run["status"],
            "reason": run.get("reason"),
            "error": run.get("error"),
            "execution_order": list(skeleton._logs.get("execution_order", [])),
            "usage": run.get("usage"),
            "execution_count": run.get("execution_count"),
        }

    # -- running nodes ----------------------------------------------------------------------------------

    def _node_request(self, orchestrator: MultiAgentBase, node_id: str, **options: Any) -> NodeRequest:
        request = self._request
        assert request is not None
        record = orchestrator._node_record(node_id)
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
            **options,
        )

    async def _execute(
        self, orchestrator: MultiAgentBase, request: NodeRequest, node_timeout: float | None
    ) -> NodeOutcome:
        assert self._request is not None
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
        fields, logs, unset = orchestrator.take_changes(include_agents=False)
        if initial_state is not None:
            fields["state"] = initial_state
        kind = orchestrator.nodes[node_id].kind if node_id else None
        await workflow.execute_local_activity(
            "orchestra.commit",
            CommitRequest(
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
            ),
            start_to_close_timeout=_LIGHT,
            retry_policy=_COMMIT_RETRIES,
        )

    def _remaining(self, limit: float | None, started: Any) -> float | None:
        if limit is None:
            return None
        elapsed: float = (workflow.now() - started).total_seconds()
        return limit - elapsed

    async def _run_graph(
        self, graph: Graph, responses: dict[str, Any], started: Any
    ) -> tuple[tuple[str, str | None] | None, list[Interrupt]]:
        fresh = not graph._node_records()
        graph._restore_queue()
        if fresh:
            for entry in graph.entry_points:
                graph._queue_node(entry, [])
        limit = graph.max_concurrency or math.inf
        running: dict[asyncio.Task[NodeOutcome], str] = {}
        failure: tuple[str, str | None] | None = None
        interrupts: list[Interrupt] = []
        while True:
            while graph._queue and len(running) < limit and failure is None and not interrupts:
                node_id = graph._queue[0]
                reason = graph._limit_reached()
                if reason:
                    failure = (f"{reason} before node {node_id!r} could run", None)
                    break
                graph._queue.pop(0)
                record = graph._node_record(node_id)
                reset = graph.reset_on_revisit and record["executions"] >= 1
                graph._start_node(node_id, {})
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
                failure = (f"execution_timeout ({graph.execution_timeout:g}s) exceeded", None)
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
                result = self._result(node_id, outcome, graph._node_record(node_id)["executions"])
                if graph.nodes[node_id].kind == "map" and result.status == Status.COMPLETED:
                    maps.clear(graph, node_id)  # its output is in the node's result now
                graph._record_result(result)
                if result.status == Status.COMPLETED:
                    graph._apply_edges(node_id, outcome.fired)
                elif result.status == Status.INTERRUPTED:
                    interrupts.extend(result.interrupts)
                elif failure is None:
                    failure = (f"node {node_id!r} failed: {result.error}", result.error)
                if batched:
                    batch.append([node_id, outcome.blob])
                else:
                    await self._commit(graph, node_id, outcome.blob)
            if batch:
                await self._commit(graph, batch=batch)
            if failure is not None:
                for task in running:
                    task.cancel()
                running.clear()
                break
        return failure, interrupts

    async def _run_map(self, graph: Graph, request: NodeRequest) -> NodeOutcome:
        """A map node as activities: save its list ("expand"), run each item that has no result yet (at
        most ``max_concurrency`` at once; items that finish together are committed together), then its
        result ("finish"). Items that completed before a worker died, or before a resume, never run
        again; the node's outcome is the finish's (or the failure of an item)."""
        node_id = request.node_id
        spec: Map = graph.nodes[node_id].executor
        count = maps.started(graph, node_id)
        if count is None:
            expanded = await self._execute(graph, replace(request, map_phase="expand"), graph.node_timeout)
            if expanded.status != "expanded":
                return expanded
            count = maps.begin(graph, node_id, None, count=expanded.map_count)
            await self._commit(graph, map_list=[node_id, expanded.blob])
        done = [maps.MapItem(i, None, None) for i in maps.completed(graph, node_id, count)]
        queue = maps.pending(graph, node_id, count)
        limit = spec.max_concurrency or math.inf
        running: dict[asyncio.Task[NodeOutcome], int] = {}
        failure: str | None = None
        interrupts: list[dict[str, Any]] = []
        joined = spec.satisfied(done, count)
        while not joined and failure is None:
            while queue and len(running) < limit:
                index = queue.pop(0)
                item = replace(request, map_phase="item", map_item=index)
                running[asyncio.ensure_future(self._execute(graph, item, graph.node_timeout))] = index
            if not running:
                break
            finished, _ = await workflow.wait(list(running), return_when=asyncio.FIRST_COMPLETED)
            batch: list[list[Any]] = []
            for task in [task for task in running if task in finished]:  # in the order they started
                index = running.pop(task)
                outcome = task.result()
                record: dict[str, Any] = {"status": outcome.status, "usage": outcome.usage}
                if outcome.error:
                    record["error"] = outcome.error
                maps.record_item(graph, node_id, index, record)
                if outcome.blob:
                    batch.append([node_id, index, outcome.blob])
                if outcome.status == "completed":
                    done.append(maps.MapItem(index, None, None))
                    joined = joined or outcome.join_done
                elif outcome.status == "interrupted":
                    interrupts.extend(outcome.interrupts)
                elif failure is None:
                    failure = f"item {index} failed: {outcome.error}"
            await self._commit(graph, map_items=batch)
            joined = joined or spec.satisfied(done, count)
            if interrupts and not running:
                break
        for task in running:  # the join holds, or an item failed: the others are not needed
            task.cancel()
        if failure is not None:
            return NodeOutcome(status="failed", blob="", error=failure)
        if interrupts:
            return NodeOutcome(status="interrupted", blob="", interrupts=interrupts)
        return await self._execute(graph, replace(request, map_phase="finish"), graph.node_timeout)

    async def _run_swarm(
        self, swarm: Swarm, responses: dict[str, Any], started: Any
    ) -> tuple[tuple[str, str | None] | None, list[Interrupt]]:
        if "next" not in swarm._fields:
            swarm._set("next", {"node": swarm.entry_point, "input": None, "from": None})
            swarm._set("shared_context", {})
        failure: tuple[str, str | None] | None = None
        interrupts: list[Interrupt] = []
        while swarm._fields.get("next") is not None and failure is None and not interrupts:
            remaining = self._remaining(swarm.execution_timeout, started)
            if remaining is not None and remaining <= 0:
                failure = (f"execution_timeout ({swarm.execution_timeout:g}s) exceeded", None)
                break
            node_id = swarm._fields["next"]["node"]
            failure = swarm._limit_before_turn(node_id)
            if failure is not None:
                break
            activation = swarm._fields["next"]
            node_input = swarm._begin_turn(node_id, {})
            # The activity composes the turn's prompt from the saved run (the task stays out of the history).
            request = self._node_request(swarm, node_id, swarm_next=activation, responses=responses)
            outcome = await self._execute(swarm, request, swarm.node_timeout)
            result = self._result(node_id, outcome, node_input.execution_count)
            failure, interrupts, _ = swarm._end_turn(result, outcome.handoff)
            await self._commit(swarm, node_id, outcome.blob)
        return failure, interrupts
