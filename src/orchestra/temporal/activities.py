"""The activities a worker runs: describe a pipeline, load a saved run, run one node, save the run.

Everything big (conversations, node outputs, agent state) goes through orchestra's storage: a node's
activity writes its data to a blob under the session scope and returns a small ``NodeOutcome``; the
commit activity (run one at a time by the workflow, so the journal keeps one writer) folds the blob and
the workflow's scheduling changes into the session journal, exactly as a local run saves after a node.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import time
from collections.abc import Iterator
from typing import Any

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError

from orchestra._json import dumps
from orchestra.agent import Agent
from orchestra.agent.agent import AgentData
from orchestra.budget import Budget
from orchestra.errors import (
    BudgetExceededError,
    SessionConflictError,
    StorageConfigurationError,
    StorageConflictError,
)
from orchestra.hooks import TurnCheckpoint
from orchestra.multiagent import (
    DEFAULT_RETRY,
    ConditionError,
    Graph,
    Map,
    MapItem,
    MapScheduler,
    MultiAgentBase,
    NodeInput,
    NodeResult,
    Status,
    Swarm,
    run_map_item,
)
from orchestra.multiagent.map import resolve_items
from orchestra.retry import attempt_note, describe_failure
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session.run_folder import COMMIT_FIELD, run_folder, turn_key
from orchestra.session.scopes import Document, Journal, ScopeLayout, decode_messages
from orchestra.spec import LoadedSpec, build
from orchestra.storage import ABSENT, Storage, delete_many, read_many, storage_from_uri
from orchestra.temporal._commits import commit_digest, commit_key
from orchestra.temporal._types import CommitRequest, NodeOutcome, NodeRequest, StateRequest, pack
from orchestra.temporal.budgets import NodeMeter, budgets_of

__all__ = ["PipelineActivities", "blob_base", "input_key", "spec_hash"]


def spec_hash(loaded: LoadedSpec) -> str:
    """A pipeline version: the hash of its parsed spec (what workers and runs compare)."""
    spec = loaded.spec
    # A setting added since runs were started (``continue_as_new``) counts only when set: a spec that
    # leaves it alone keeps the version it had, so upgraded workers go on with the runs in flight.
    unset = spec.temporal.continue_as_new == type(spec.temporal.continue_as_new)()
    dumped = spec.model_dump_json(exclude={"temporal": {"continue_as_new"}} if unset else None)
    return hashlib.sha256(dumped.encode()).hexdigest()[:16]


def input_key(session_id: str, spec_id: str, run_id: str, name: str) -> str:
    """Where a run's input (``task``, ``state``: its invocation state) waits for the workflow's activities."""
    return f"{run_folder(session_id, spec_id, run_id)}input-{name}.json"


async def _read_json(storage: Storage, key: str, what: str) -> Any:
    found = await storage.read(key)
    if found is None:
        raise ApplicationError(f"{key}: the run's {what} is missing from storage", non_retryable=True)
    return json.loads(found[0])


# What the last commit saved held: a digest of it, and the node and item blobs it folded in. A workflow
# task that fails after its commit was saved is replayed with what happened meanwhile, so the same commit
# (same id) can come back holding more: more nodes or items (with blobs, or failed without one), other
# fields. It is saved again, whole (fields are whole values, logs go by their index), but the blobs folded
# in already are not applied twice; only a retry holding exactly what was saved is skipped.
_FOLDED_FIELD = "temporal/folded"

# Every node's activity loads the run from storage: fold the journal often so a load stays short.
_COMPACTION = Compaction(min_bytes=8 * 1024, ratio=2.0, max_records=16)


def _extend(old: list[Any], new: list[Any]) -> list[Any]:
    """``new``, reusing the objects of ``old`` for an unchanged prefix (so the journal appends, not resets)."""
    if len(new) >= len(old) and new[: len(old)] == old:
        return [*old, *new[len(old) :]]
    return new


def _logged(journal: Journal, request: CommitRequest, name: str, items: list[Any]) -> list[Any]:
    """The log the commit saves: ``items`` after the ones committed (``request.log_from``), or whole."""
    start = request.log_from.get(name)
    old = journal.log(name)
    if start is None:
        return _extend(old, items)
    if len(old) < start:  # a journal kept on this worker while another worker committed (see commit())
        raise SessionConflictError(
            f"{journal.layout.describe()}: log {name!r} holds {len(old)} items where the run committed "
            f"{start}: the journal read is behind the run"
        )
    return [*old[:start], *items]


def _light(fields: dict[str, Any]) -> dict[str, Any]:
    """The run document without what the workflow never needs: the task, outputs, messages, agent state."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name.startswith("agent/") or name in ("state", "task", COMMIT_FIELD, _FOLDED_FIELD):
            continue
        if name.startswith("node/") and isinstance(value, dict) and value.get("result"):
            result = {k: v for k, v in value["result"].items() if k not in ("output", "message")}
            value = {**value, "result": result}
        if name.startswith("map/"):
            if name.endswith("/items"):
                continue  # a map's list: its activities read it from storage
            if "/item/" in name and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "output"}
        out[name] = value
    return out


@contextlib.contextmanager
def _final_if_misconfigured() -> Iterator[None]:
    """Storage errors that retries cannot fix (``StorageConfigurationError``: no credentials, a wrong key,
    no bucket) fail the activity at once, with their message, instead of being retried until the run
    seems to hang. Every other storage error (an outage, a full disk, a lost answer) is retried."""
    try:
        yield
    except StorageConfigurationError as exc:
        raise ApplicationError(
            f"{exc} (a configuration problem: retrying will not help)",
            type="StorageConfigurationError",
            non_retryable=True,
        ) from exc


def _state_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What a node did to the shared state: the keys it set (to a new value) and the keys it deleted."""
    return {
        "set": {k: v for k, v in after.items() if k not in before or before[k] != v},
        "del": [k for k in before if k not in after],
    }


def _merged_state(stored: dict[str, Any] | None, blob: dict[str, Any]) -> dict[str, Any]:
    """The run's state after a node: its changes applied to the state as committed so far (completion
    order: of two parallel nodes setting one key, the one that finished last wins, as locally where the
    later ``set`` wins)."""
    if "state_changes" not in blob:  # a blob written before changes were recorded: its whole state
        return dict(blob["state"])
    state = dict(stored if stored is not None else blob.get("state_base") or {})
    state.update(blob["state_changes"]["set"])
    for key in blob["state_changes"]["del"]:
        state.pop(key, None)
    return state


_RunKey = tuple[str, str, str]  # storage URI, session id, scope id


def _what(orchestrator: MultiAgentBase, request: NodeRequest) -> str:
    """What ran, in the words failures use (``node 'a'``, ``agent 'b'``, ``item 2 of 'm'``)."""
    if request.map_phase == "item":
        return f"item {request.map_item} of {request.node_id!r}"
    return f"{'agent' if isinstance(orchestrator, Swarm) else 'node'} {request.node_id!r}"


class _RunReader:
    """A run's document as this worker last read it (see ``PipelineActivities._document``)."""

    def __init__(self, storage: Storage, where: _RunKey) -> None:
        self.journal = Journal(storage, ScopeLayout(where[1], "multiAgent", where[2]))
        self.doc: Document | None = None
        self.lock = anyio.Lock()
        self.read_began = -math.inf  # when the read that made ``doc`` began (time.monotonic())
        # The commits ``doc`` is known to hold, by key (``commit_key``), the most recent last.
        self.held: dict[str, None] = {}

    def hold(self, key: str) -> None:
        if key:
            self.held.pop(key, None)
            self.held[key] = None
            if len(self.held) > 64:  # a node depends on a recent commit: the oldest go first
                del self.held[next(iter(self.held))]

    def following(self, run_id: str) -> bool:
        """Whether ``doc`` is of run ``run_id`` (not of a run that deleted the session and wrote it again)."""
        return self.doc is not None and (self.doc.fields.get("run") or {}).get("run_id") == run_id


def _last_commit(doc: Document) -> str:
    """The key of the last commit ``doc`` holds ("" for one saved without a version)."""
    folded = doc.fields.get(_FOLDED_FIELD)
    commit_id = doc.fields.get(COMMIT_FIELD)
    version = folded.get("version") if isinstance(folded, dict) else None
    return commit_key(commit_id, version) if isinstance(commit_id, str) and isinstance(version, str) else ""


def _node_view(doc: Document, node_id: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """What one node's activity loads of the run document (which is shared: the worker's reader keeps it).

    Of the agents' state, only the node's own agent's, copied whole: every other agent's conversation
    stays unread. The node records go as they are (``RunDocument.load(shared_records=True)`` copies the one
    the node changes); the other records (the run, the state) are copied a level deep, since the
    orchestrator changes them in place."""
    own = (f"agent/{node_id}", f"agent/{node_id}/messages")
    tools = f"agent/{node_id}/tools/"  # the agents the node's agent uses as tools: saved with it

    def mine(name: str) -> bool:
        return name in own or name.startswith(tools)

    def view(name: str, value: Any) -> Any:
        if mine(name):
            return copy.deepcopy(value)
        if isinstance(value, dict) and not name.startswith("node/"):
            return dict(value)
        return value

    fields = {
        name: view(name, value)
        for name, value in doc.fields.items()
        if not name.startswith("agent/") or mine(name)
    }
    logs = {
        name: copy.deepcopy(items) if mine(name) else items
        for name, items in doc.logs.items()
        if not name.startswith("agent/") or mine(name)
    }
    return fields, logs


class PipelineActivities:
    """The activities for the pipelines a worker hosts (spec id -> parsed spec)."""

    def __init__(self, specs: dict[str, LoadedSpec]) -> None:
        self.specs = specs
        self._storages: dict[str, Storage] = {}
        self._invocation_states: dict[str, dict[str, Any]] = {}  # by key: a run's nodes share one
        self._journals: dict[_RunKey, Journal] = {}  # by run scope: see commit()
        self._readers: dict[_RunKey, _RunReader] = {}  # by run scope: see _document()
        self._templates: dict[str, MultiAgentBase] = {}  # by spec id: see _orchestrator()
        self._hashes: dict[str, str] = {}  # by spec id

    def _storage(self, uri: str) -> Storage:
        if uri not in self._storages:
            self._storages[uri] = storage_from_uri(uri)
        return self._storages[uri]

    def _spec(self, spec_id: str, version: str = "") -> LoadedSpec:
        if spec_id not in self.specs:
            raise ApplicationError(
                f"this worker does not host pipeline {spec_id!r} (it hosts {', '.join(sorted(self.specs))})",
                non_retryable=True,
            )
        loaded = self.specs[spec_id]
        if spec_id not in self._hashes:  # hashing a large spec per activity would cost a build's worth
            self._hashes[spec_id] = spec_hash(loaded)
        if version and self._hashes[spec_id] != version:
            raise ApplicationError(
                f"this worker hosts another version of pipeline {spec_id!r} (spec hash {self._hashes[spec_id]}; "
                f"the run was started with {version}): deploy the same file to every worker of the task queue, "
                "or start the run again against the new version",
                non_retryable=True,
            )
        return loaded

    async def _invocation_state(self, storage: Storage, request: NodeRequest) -> dict[str, Any]:
        key = request.invocation_state_ref
        if not key:
            return request.invocation_state
        if key not in self._invocation_states:
            if len(self._invocation_states) >= 64:  # a few runs' worth; the oldest goes first
                del self._invocation_states[next(iter(self._invocation_states))]
            self._invocation_states[key] = await _read_json(storage, key, "invocation state")
        return dict(self._invocation_states[key])

    def _orchestrator(self, request: NodeRequest, storage: Storage) -> MultiAgentBase:
        """The pipeline to run one node in. A function node runs in a copy of the pipeline this worker
        built once (``copy_for_run``), so an activity does not build every node of a large pipeline.
        Agents and nested orchestrators hold state of their own, so their nodes get the pipeline built
        afresh, where nested graphs and swarms persist (and resume) under the session."""
        loaded = self._spec(request.spec_id, request.spec_hash)
        template = self._templates.get(request.spec_id)
        if template is None:
            built = build(loaded)
            assert isinstance(built, MultiAgentBase)
            template = self._templates[request.spec_id] = built
        if isinstance(template, Graph) and self._shares_template(template, request):
            # A map's items are fresh copies of its template (or fresh builds): the copy holds none.
            return template.copy_for_run()
        orchestrator = build(loaded)
        assert isinstance(orchestrator, MultiAgentBase)
        orchestrator.set_session_manager(SnapshotSessionManager(request.session_id, storage=storage))
        return orchestrator

    @staticmethod
    def _shares_template(template: Graph, request: NodeRequest) -> bool:
        """Whether the node runs on a copy of the pipeline built once: a function node, or a map whose
        items hold nothing of their own. A map's items get a fresh build when they are metered (the
        meter's hooks go on its template agent, which every copy shares) or built by a factory (a graph
        or swarm per item, persisted under the session, so that a retried item resumes it)."""
        node = template.nodes[request.node_id]
        if node.kind == "function":
            return True
        if node.kind != "map":
            return False
        metered = request.budget is not None or template.metered()
        spec = node.executor
        while isinstance(spec.node, Map):  # what runs per item of a map of maps: the innermost's
            spec = spec.node
        return not metered and spec.template_kind != "factory"

    async def _document(self, storage: Storage, request: NodeRequest) -> Document | None:
        """The run document as committed so far (shared: read it, do not change it).

        A worker keeps the runs it serves and reads only the records committed since its last read, so
        a node's activity costs the same at the end of a long run as at its start. Every commit a node
        depends on was saved before its activity started, so a read that began after that has them all:
        the parallel nodes of a fan-out share one read instead of listing the journal each. And a node
        reads nothing when the worker's copy holds the commit it depends on (``after_commit``, by key:
        number and version), which it knows of the last commit each read found and of the commit each
        node depended on whose read began after it started. By key, a copy holding a commit that a
        replayed workflow task saved again with more since does not pass for holding the new version."""
        started = time.monotonic()
        where = (request.storage, request.session_id, request.scope_id)
        reader = self._readers.pop(where, None) or _RunReader(storage, where)
        self._readers[where] = reader  # the most recently used last
        if len(self._readers) > 64:  # runs in flight on this worker; the least recently used goes first
            del self._readers[next(iter(self._readers))]
        # (A read in progress applies its records between awaits, so the document is whole meanwhile.)
        if request.after_commit in reader.held and reader.following(request.run_id):
            return reader.doc
        async with reader.lock:  # parallel nodes of one run read the new records once
            if reader.read_began >= started and reader.following(request.run_id):
                reader.hold(request.after_commit)
                return reader.doc
            began = time.monotonic()
            if reader.doc is not None:
                reader.doc = await reader.journal.catch_up(reader.doc)
                # Another run than the one followed: the session was deleted and written again.
                if not reader.following(request.run_id):
                    reader.doc = None
            if reader.doc is None:
                reader.journal = Journal(reader.journal.storage, reader.journal.layout)
                reader.held.clear()
                reader.doc = await reader.journal.load()
            reader.read_began = began
            if reader.doc is not None:
                reader.hold(_last_commit(reader.doc))
                reader.hold(request.after_commit)
            return reader.doc

    @staticmethod
    def _holding_items(request: NodeRequest, doc: Document | None) -> None:
        """A nested map's finish gives its items' outputs: the run as read must hold every item the
        workflow committed as completed, or the attempt fails (and is retried) rather than give the map a
        result without one."""
        fields = doc.fields if doc is not None else {}
        names = [(i, MapScheduler.item_name(request.map_key, i)) for i in request.map_done]
        lost = [i for i, name in names if (fields.get(name) or {}).get("status") != "completed"]
        if lost:
            layout = ScopeLayout(request.session_id, "multiAgent", request.scope_id)
            raise ApplicationError(
                f"{layout.describe()} ({layout.journal}): items {lost} of map {request.map_key!r} were "
                "committed as completed, but the session's journal does not hold them"
            )

    @activity.defn(name="orchestra.describe")
    async def describe(self, spec_id: str) -> dict[str, Any]:
        """The pipeline's structure (nodes, edges, limits) for the workflow's scheduling skeleton, and its
        ``temporal:`` settings (retries, heartbeat)."""
        loaded = self._spec(spec_id)
        built = build(loaded)
        if not isinstance(built, MultiAgentBase):
            raise ValueError(f"pipeline {spec_id!r} is a single agent; Temporal runs graphs and swarms")
        described = {**built.structure(), "temporal": loaded.spec.temporal.model_dump()}
        budgets = budgets_of(built)
        if budgets:  # only then: the description of a pipeline without one stays what it was
            described["budgets"] = budgets
        return pack(described)

    @activity.defn(name="orchestra.load_state")
    async def load_state(self, request: StateRequest) -> dict[str, Any] | None:
        with _final_if_misconfigured():
            return await self._load_state(request)

    async def _load_state(self, request: StateRequest) -> dict[str, Any] | None:
        """The saved run's scheduling state (results without their outputs), or None for a new session."""
        layout = ScopeLayout(request.session_id, "multiAgent", request.scope_id)
        doc = await Journal(self._storage(request.storage), layout).load()
        if doc is None:
            return None
        logs = {k: v for k, v in doc.logs.items() if not k.startswith("agent/")}
        return pack({"fields": _light(doc.fields), "logs": logs})

    @activity.defn(name="orchestra.execute_node")
    async def execute_node(self, request: NodeRequest) -> NodeOutcome:
        with _final_if_misconfigured():
            return await self._execute_node(request)

    async def _execute_node(self, request: NodeRequest) -> NodeOutcome:
        """Run one node (or swarm turn) from its state before it started; save its data to a blob."""
        storage = self._storage(request.storage)
        orchestrator = self._orchestrator(request, storage)
        doc = await self._document(storage, request)
        if request.map_done:
            self._holding_items(request, doc)
        if doc is not None:
            orchestrator.document.load(*_node_view(doc, request.node_id), shared_records=True)
        node = orchestrator.nodes[request.node_id]
        if request.reset:
            node.reset()
        if node.kind == "agent":
            await self._keep_open_turn(storage, request, orchestrator, node.agent)
        if isinstance(orchestrator, Graph):
            # Results are read back from the document when read: a function node's inputs only, unless an
            # edge condition or an agent's tool (through ToolContext.orchestrator) reads others.
            document = orchestrator.document
            inputs = {s: r.output for s in request.activation if (r := document.result(s)) is not None}
            task = request.prompt if request.prompt is not None else orchestrator.document.field("task")
        elif request.swarm_next is not None:  # a swarm turn: its prompt is composed here, from the saved run
            assert isinstance(orchestrator, Swarm)
            inputs, task = {}, orchestrator.scheduler().compose_input(request.node_id, request.swarm_next)
        else:
            inputs, task = {}, request.prompt
        invocation_state = await self._invocation_state(storage, request)
        state_before = orchestrator.state.to_dict()
        node_input = NodeInput(
            node_id=request.node_id,
            task=task,
            inputs=inputs,
            state=orchestrator.state,
            invocation_state=invocation_state,
            execution_count=request.execution_count,
        )
        base = blob_base(request)
        if request.map_phase == "expand":
            return await self._expand(
                storage, orchestrator, node_input, request.map_key, f"{base}-items.json"
            )
        if request.map_phase == "item":
            base = f"{base}-item{request.map_item}"
        # Failed attempts of this execution (or item) so far: a retry goes on from them (see _retry).
        attempts_key = f"{base}-attempts.json"
        attempts: list[dict[str, Any]] = []
        if activity.info().attempt > 1:
            found = await storage.read(attempts_key)
            attempts = json.loads(found[0]) if found is not None else []
        node_input.attempt = len(attempts) + 1
        run_budget = Budget.from_json(request.budget) if request.budget else orchestrator.budget
        meter = NodeMeter(
            orchestrator, request.node_id, run_budget, request.elapsed_s, storage, f"{base}-spent.json"
        )
        metered_item = request.map_phase == "item" and meter.metered
        if meter.metered and (node.kind in ("agent", "orchestrator") or metered_item):
            if activity.info().attempt > 1:
                await meter.restore()
            meter.attach(node.executor)
            if metered_item:  # what the item builds as it runs (a factory's agent or pipeline) too
                orchestrator.count_spending_with(meter)
        started = time.perf_counter()
        timeout: float | None = getattr(orchestrator, "node_timeout", None)
        key = request.map_key or request.node_id
        if request.map_phase == "finish":
            spec = orchestrator.nodes[request.node_id].executor.nested(key)
            result = MapScheduler(orchestrator.document, key).result(request.node_id, spec)
            error = None
        elif request.map_phase == "item":
            index = request.map_item
            result, error = await self._run(
                lambda: run_map_item(
                    orchestrator, request.node_id, node_input, index, request.responses, timeout, key
                ),
                orchestrator,
                request,
            )
        else:
            result, error = await self._run(
                lambda: node.execute(node_input, orchestrator, None, request.responses), orchestrator, request
            )
        if error is not None:
            described = result.error or f"{type(error).__name__}: {error}"  # as _run described it
            await self._retry(
                storage, node, request, attempts, attempts_key, error, described, node_input.attempt
            )
            result.error = f"{result.error}{attempt_note(node_input.attempt, node.retry or DEFAULT_RETRY)}"
        fired: dict[str, bool] = {}
        join_done = False
        # An item's record; a nested map's finish gives the record of the outer item it ran.
        of_item = request.map_phase == "item" or (request.map_phase == "finish" and bool(request.map_key))
        status = result.status.value
        if of_item:
            record = MapScheduler.item_record(result, (time.perf_counter() - started) * 1000, attempts)
            if result.status == Status.INTERRUPTED and not result.interrupts and result.error:
                status = record["status"] = "stopped"  # a budget: the item runs again on resume
            parent, index = _item_of(request)
            join_done = result.status == Status.COMPLETED and _until_holds(
                orchestrator, request.node_id, parent, index, result
            )
            blob: dict[str, Any] = {"result": record}
        else:
            if isinstance(orchestrator, Graph) and result.status == Status.COMPLETED:
                scheduler = orchestrator.scheduler()
                scheduler.record(result)  # the conditions see it
                try:
                    fired = scheduler.evaluate_edges(request.node_id, invocation_state)
                except ConditionError as exc:
                    result = NodeResult(node_id=request.node_id, status=Status.FAILED, error=str(exc))
            blob = {"result": result.model_dump(mode="json")}
            if attempts:
                blob["attempts"] = attempts
        handoff = orchestrator.take_handoff() if isinstance(orchestrator, Swarm) else None
        # Changes, not the whole state: parallel nodes' writes merge at commit, as locally.
        blob["state_changes"] = _state_changes(state_before, orchestrator.state.to_dict())
        blob["state_base"] = state_before
        if node.kind == "agent":
            fields, messages = orchestrator.document.agent_fields(request.node_id)
            blob["agent"] = fields
            blob["messages"] = messages
            # The agents it used as tools (``agent/<node>/tools/<tool>``), as a local run saves them.
            changed, changed_logs, _ = orchestrator.document.take_changes()
            prefix = f"agent/{request.node_id}/tools/"
            tool_agents = {
                name[len("agent/") :]: {"agent": value, "messages": changed_logs.get(f"{name}/messages", [])}
                for name, value in changed.items()
                if name.startswith(prefix) and not name.endswith("/messages")
            }
            if tool_agents:
                blob["tool_agents"] = tool_agents
        blob_key = f"{base}.json"
        await _write_blob(storage, blob_key, blob)
        return NodeOutcome(
            status=status,
            blob=blob_key,
            error=result.error,
            usage=result.usage.model_dump(),
            execution_time_ms=result.execution_time_ms,
            interrupts=[i.model_dump(mode="json") for i in result.interrupts],
            fired=fired,
            handoff=handoff,
            join_done=join_done,
            spent=meter.spent.to_json() if meter.spent.model_calls else {},
        )

    async def _expand(
        self, storage: Storage, orchestrator: MultiAgentBase, node_input: NodeInput, map_key: str, key: str
    ) -> NodeOutcome:
        """A map's first step: save the list it fans out over (its items read it from there). A nested
        map's list is its outer item."""
        node_id = node_input.node_id
        try:
            if map_key:
                parent, _, index = map_key.rpartition(":")
                items = MapScheduler(orchestrator.document, parent).items()[int(index)]
                if not isinstance(items, list):
                    raise TypeError(f"item {index} is a {type(items).__name__}; a nested map needs a list")
            else:
                spec = orchestrator.nodes[node_id].executor
                items = resolve_items(spec, node_id, node_input, orchestrator)
        except Exception as exc:  # over= names nothing, or is not a JSON list: the node fails
            return NodeOutcome(status="failed", blob="", error=f"{type(exc).__name__}: {exc}")
        await _write_blob(storage, key, {"map_items": items})
        return NodeOutcome(status="expanded", blob=key, map_count=len(items))

    @staticmethod
    async def _retry(
        storage: Storage,
        node: Any,
        request: NodeRequest,
        attempts: list[dict[str, Any]],
        attempts_key: str,
        error: BaseException,
        described: str,
        attempt: int,
    ) -> None:
        """The node's retry policy, on Temporal's activity retries: a failed attempt the policy retries
        is recorded (in storage, beside the run's blobs) and raised, so that Temporal runs the activity
        again after the policy's interval; otherwise the failure is final and returns as the outcome."""
        policy = node.retry or DEFAULT_RETRY
        if attempt >= policy.max_attempts or not policy.retries(error):
            return
        attempts.append(
            {
                "execution": request.execution_count,
                "attempt": attempt,
                "error": described,
                "retry_in": round(policy.interval(attempt), 3),
            }
        )
        await storage.write(attempts_key, dumps(attempts).encode())
        # The next attempt starts from the node's state before it started, as locally (the failed one
        # was rolled back), unless a side-effecting tool of its turn ran: then, as locally, the turn stays
        # open and the next attempt resumes it from the checkpoint (the effect runs once).
        pending = node.agent.pending_tools if node.kind == "agent" else None
        if not (pending is not None and pending.started):
            await delete_many(storage, [_turn_key(request)])
        raise ApplicationError(
            f"attempt {attempt} of {policy.max_attempts} of node {request.node_id!r} failed: {described}",
            type="NodeAttemptFailed",
        )

    async def _keep_open_turn(
        self, storage: Storage, request: NodeRequest, orchestrator: MultiAgentBase, agent: Agent
    ) -> None:
        """Make the node's agent durable mid-turn, as a session does locally: its side-effecting tools
        checkpoint its open turn (``TurnCheckpoint``) into a blob of this execution, and a retried
        attempt (after a worker died) starts from that blob, so the turn resumes instead of starting over
        and an effect runs once. Keys are the same as locally: the session, the scope, the node."""
        agent.bind_session(f"{request.session_id}/multiAgent/{request.scope_id}/{request.node_id}")
        key = _turn_key(request)
        found = await storage.read(key)
        if found is not None:  # an earlier attempt of this execution kept its turn open
            saved = json.loads(found[0])
            agent.load_agent_data(AgentData(messages=saved["messages"], **saved["agent"]))

        async def checkpoint(event: TurnCheckpoint) -> None:
            fields, messages = orchestrator.document.agent_fields(request.node_id)
            await storage.write(key, dumps({"agent": fields, "messages": messages}).encode())

        agent.hooks.add_callback(TurnCheckpoint, checkpoint)

    async def _run(
        self, call: Any, orchestrator: MultiAgentBase, request: NodeRequest
    ) -> tuple[NodeResult, BaseException | None]:
        """Run ``call()`` (one attempt at the node or item) with heartbeats: its result, and what it
        raised (then the result is a FAILED one saying so)."""
        # A worker that dies stops heartbeating: Temporal then retries the node elsewhere. Temporal times
        # the first heartbeat from the activity's start, so a node that ends sooner never sends one.
        limit = activity.info().heartbeat_timeout
        every = min(0.5, limit.total_seconds() / 4) if limit else 0.5

        async def heartbeat() -> None:
            while True:
                await anyio.sleep(every)
                activity.heartbeat()

        # The node's own timeout is enforced here, as locally, so that it is a final failure (one
        # execution); the activity's start-to-close timeout only backs up a worker that stopped.
        timeout: float | None = getattr(orchestrator, "node_timeout", None)  # Graph and Swarm both have one
        error: BaseException | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(heartbeat)
            try:
                # A map item bounds each attempt itself.
                with anyio.fail_after(None if request.map_phase == "item" else timeout):
                    result: NodeResult = await call()
            except TimeoutError as exc:
                message = describe_failure(exc, timeout, _what(orchestrator, request))
                result, error = NodeResult(node_id=request.node_id, status=Status.FAILED, error=message), exc
            except BudgetExceededError as exc:  # a budget of a nested run: the node stops, resumable
                result = NodeResult(node_id=request.node_id, status=Status.INTERRUPTED, error=str(exc))
            except Exception as exc:
                error = exc
                result = NodeResult(
                    node_id=request.node_id, status=Status.FAILED, error=f"{type(exc).__name__}: {exc}"
                )
            group.cancel_scope.cancel()
        result.execution_count = request.execution_count
        return result, error

    @activity.defn(name="orchestra.commit")
    async def commit(self, request: CommitRequest) -> None:
        with _final_if_misconfigured():
            # A run's commits come one at a time from its workflow, usually on this worker: keep its
            # journal between them instead of loading it each time. Another worker's commit since makes
            # the next record exist already, and the save refuses; then load it again.
            where = (request.storage, request.session_id, request.scope_id)
            journal = self._journals.pop(where, None)
            try:
                journal = await self._commit(request, journal)
            except SessionConflictError:
                if journal is None:
                    raise
                journal = await self._commit(request, None)
            if len(self._journals) >= 64:  # runs in flight on this worker; the oldest goes first
                del self._journals[next(iter(self._journals))]
            self._journals[where] = journal

    async def _commit(self, request: CommitRequest, journal: Journal | None) -> Journal:
        """Fold the workflow's changes and a node's blob into the session journal (idempotent on retry).

        Only the fields and logs this commit touches are read from the journal (decoded), not the whole
        run document: a commit costs the same at the end of a long run as at its start."""
        storage = self._storage(request.storage)
        if journal is None:
            layout = ScopeLayout(request.session_id, "multiAgent", request.scope_id)
            journal = Journal(storage, layout, _COMPACTION)
            await journal.load()
        # The nodes this commit is for, with their blobs ("" for a node whose activity failed: its record
        # holds the failure).
        nodes = [(request.node_id, request.blob or "")] if request.node_id else []
        nodes += [(node_id, blob) for node_id, blob in request.batch]
        item_blobs = [str(blob) for _, _, blob in request.map_items if blob]
        map_list = request.map_list[1:] if request.map_list else []
        inputs = [
            key
            for key in [
                *(blob for _, blob in nodes),
                *item_blobs,
                *map_list,
                request.task_ref,
                *request.delete,
            ]
            if key
        ]
        for key in request.delete:
            self._invocation_states.pop(key, None)
        folding = [key for key in [*(blob for _, blob in nodes), *item_blobs] if key]
        digest = commit_digest(request)
        folded: set[str] = set()  # blobs a saved attempt of this commit folded in already
        if request.commit_id and journal.field(COMMIT_FIELD) == request.commit_id:
            # A retry of a commit that was saved (the worker died before Temporal heard of it). Saved before
            # the digest was kept: it held it all, as before.
            saved = journal.field(_FOLDED_FIELD)
            if not isinstance(saved, dict) or saved.get("digest") == digest:
                await _delete_inputs(storage, request, inputs)
                return journal
            folded = set(saved.get("blobs") or [])
        fields = dict(request.fields)
        if request.commit_id:
            fields[COMMIT_FIELD] = request.commit_id
            fields[_FOLDED_FIELD] = {"digest": digest, "blobs": folding}
            if request.version:  # which version of the commit a copy of the run holds (see _document)
                fields[_FOLDED_FIELD]["version"] = request.version
        # Results are owned by storage: the workflow only holds their summaries.
        own = {f"node/{node_id}" for node_id, _ in nodes}
        for name, record in list(fields.items()):
            if name.startswith("node/") and name not in own and isinstance(record, dict):
                stored = journal.field(name)
                if isinstance(stored, dict):
                    fields[name] = {**record, "result": stored.get("result")}
        logs = {name: _logged(journal, request, name, items) for name, items in request.logs.items()}
        # A retried commit may find its inputs deleted by the attempt that saved them: then the journal
        # already holds them (same run, same execution), and the inputs are left as saved.
        same_run = bool(request.run_id) and (journal.field("run") or {}).get("run_id") == request.run_id
        if request.task_ref:
            found = await storage.read(request.task_ref)
            if found is not None:
                fields["task"] = json.loads(found[0])
            elif same_run:
                fields.pop("task", None)
            else:
                raise RuntimeError(f"{request.task_ref}: the run's task is missing")
        state = journal.field("state")
        with_blobs = [(node_id, key) for node_id, key in nodes if key]
        # A blob folded in already counts as deleted: the journal holds it (see _FOLDED_FIELD).
        blobs = await read_many(storage, [key for _, key in with_blobs if key not in folded])
        blobs = _unfolded(blobs, [key for _, key in with_blobs], folded)
        for (node_id, blob_key), found in zip(with_blobs, blobs, strict=True):
            name = f"node/{node_id}"
            stored = journal.field(name)
            if found is not None:
                blob = json.loads(found[0])
                fields[name] = {**fields.get(name, stored or {}), "result": blob["result"]}
                # In completion order.
                state = fields["state"] = _merged_state(state, blob)
                if "agent" in blob:
                    fields[f"agent/{node_id}"] = blob["agent"]
                    log = f"agent/{node_id}/messages"
                    logs[log] = _extend(journal.log(log), decode_messages(blob["messages"], blob_key))
                for key, saved in (blob.get("tool_agents") or {}).items():
                    fields[f"agent/{key}"] = saved["agent"]
                    log = f"agent/{key}/messages"
                    logs[log] = _extend(journal.log(log), decode_messages(saved["messages"], blob_key))
            elif same_run and _holds_execution(stored, fields.get(name)):
                fields[name] = {**fields.get(name, {}), "result": (stored or {}).get("result")}
            else:
                raise RuntimeError(f"{blob_key}: the node's data is missing")
            if found is not None and "attempts" in blob:
                fields[name]["attempts"] = blob["attempts"]
        state = await _fold_map(storage, journal, request, fields, state, same_run, folded)
        if journal.absent:
            await journal.create(Document(fields=fields, logs=logs))
        else:
            await journal.save(fields, logs, request.unset)
        # Committed: the journal holds them now, so the run's storage does not grow by a copy per node.
        await _delete_inputs(storage, request, inputs)
        return journal


def blob_base(request: NodeRequest) -> str:
    """Where an execution's blobs go (``<base>.json``, ``<base>-items.json``, ...): ``<node>-<execution>``
    in the run's folder; a nested map's, named by the outer items' indexes after "in" (so that "a-1-in2"
    is never the "<node>-<execution>" of a node "a-1")."""
    base = f"{run_folder(request.session_id, request.scope_id, request.run_id)}{request.node_id}-{request.execution_count}"
    if request.map_key:
        base = f"{base}-in{request.map_key.partition(':')[2].replace(':', '.')}"
    return base


async def _delete_inputs(storage: Storage, request: CommitRequest, inputs: list[str]) -> None:
    """Delete what a saved commit folded in, at once (local files unlink a folder's keys under one lock
    and sync it once). The run's last commit clears the run's whole folder instead, which holds them."""
    if not (request.ends_run and request.run_id):
        await delete_many(storage, inputs)
        return
    folder = run_folder(request.session_id, request.scope_id, request.run_id)
    await delete_many(storage, [key for key in inputs if not key.startswith(folder)])
    await storage.delete_prefix(folder)


async def _fold_map(
    storage: Storage,
    journal: Journal,
    request: CommitRequest,
    fields: dict[str, Any],
    state: Any,
    same_run: bool,
    folded: set[str],
) -> Any:
    """Fold a map's list and its items' results (from their blobs) into the fields this commit saves;
    returns the shared state after the items' changes (in the order the items are listed)."""
    if request.map_list:
        key, blob_key = request.map_list
        found = await storage.read(blob_key)
        if found is not None:
            fields[MapScheduler.items_name(key)] = json.loads(found[0])["map_items"]
        elif not (same_run and journal.field(MapScheduler.items_name(key)) is not None):
            raise RuntimeError(f"{blob_key}: the map's list is missing")
    keys = [str(blob) for _, _, blob in request.map_items]
    read = await read_many(storage, [key for key in keys if key not in folded])
    for (key, index, blob_key), found in zip(request.map_items, _unfolded(read, keys, folded), strict=True):
        name = MapScheduler.item_name(str(key), int(index))
        if found is not None:
            blob = json.loads(found[0])
            fields[name] = blob["result"]
            state = fields["state"] = _merged_state(state, blob)
        elif same_run and (journal.field(name) or {}).get("status") == (fields.get(name) or {}).get("status"):
            fields[name] = journal.field(name)  # a retried commit: the attempt before saved it
        else:
            raise RuntimeError(f"{blob_key}: the item's data is missing")
    return state


def _unfolded(
    found: list[tuple[bytes, str] | None], keys: list[str], folded: set[str]
) -> list[tuple[bytes, str] | None]:
    """``found`` (what was read of the keys not in ``folded``) for every key: None for a folded one."""
    read = iter(found)
    return [None if key in folded else next(read) for key in keys]


def _turn_key(request: NodeRequest) -> str:
    """Where an agent node's open turn is checkpointed during one execution (see ``_keep_open_turn``)."""
    return turn_key(
        request.session_id, request.scope_id, request.run_id, request.node_id, request.execution_count
    )


async def _write_blob(storage: Storage, key: str, blob: dict[str, Any]) -> None:
    data = dumps(blob).encode()
    try:  # each execution has its own key: create-only (local files then need no lock or rename)
        await storage.write(key, data, expect=ABSENT)
    except StorageConflictError:  # a retried attempt: the one before wrote it and was lost after
        await storage.write(key, data)


def _item_of(request: NodeRequest) -> tuple[str, int]:
    """The map an item activity's result belongs to, and the item's index: the item's own map, or for a
    nested map's finish, the map one level up and the outer item it ran."""
    if request.map_phase == "finish":
        parent, _, index = request.map_key.rpartition(":")
        return parent, int(index)
    return request.map_key or request.node_id, request.map_item


def _until_holds(
    orchestrator: MultiAgentBase, node_id: str, key: str, index: int, result: NodeResult
) -> bool:
    """Whether map ``key``'s ``until`` join holds with the items completed so far and this one."""
    spec = orchestrator.nodes[node_id].executor.nested(key)
    if not callable(spec.join):
        return False
    scheduler = MapScheduler(orchestrator.document, key)
    count = scheduler.started or 0
    items = scheduler.items()
    done = {i: (scheduler.item(i) or {}).get("output") for i in scheduler.completed()}
    done[index] = result.output
    return bool(spec.satisfied([MapItem(i, items[i], done[i]) for i in sorted(done)], count))


def _holds_execution(stored: dict[str, Any] | None, record: dict[str, Any] | None) -> bool:
    """Whether the journal's node record already has the result of the execution being committed."""
    result = (stored or {}).get("result") or {}
    return record is not None and result.get("execution_count") == record.get("executions")
