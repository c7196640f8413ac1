"""What crosses between the Temporal workflow, its activities and the CLI (small: big data is by reference)."""

# No ``from __future__ import annotations`` here: temporalio's converter reads these classes' type hints
# for every payload it decodes, and string annotations would be compiled again each time (two thirds of
# decoding a node's request).
import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "WORKFLOW_NAME",
    "CommitRequest",
    "NodeOutcome",
    "NodeRequest",
    "RunRequest",
    "StateRequest",
    "pack",
    "unpack",
]

WORKFLOW_NAME = "orchestra.pipeline"

# What the workflow reads back whole (a pipeline's description, a run's scheduling state) grows with the
# graph and the run: above this many bytes of JSON it crosses compressed, so a graph of many thousand nodes
# stays under Temporal's 2 MB payload limit. Smaller ones cross as they are (histories recorded before
# replay unchanged).
PACK_ABOVE = 256 * 1024
_PACKED = "orchestra/zlib"


def pack(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as an activity returns it to the workflow: itself, or compressed when large."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if len(text) <= PACK_ABOVE:
        return value
    return {_PACKED: base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")}


def unpack(value: Any) -> Any:
    """What ``pack`` gave, as it was."""
    if isinstance(value, dict) and len(value) == 1 and _PACKED in value:
        return json.loads(zlib.decompress(base64.b64decode(value[_PACKED])))
    return value


@dataclass
class RunRequest:
    """Start (or resume) a pipeline run: the workflow's input."""

    spec_id: str
    session_id: str
    storage: str
    task: Any = None
    run_id: str = ""
    resume: bool = False
    force: bool = False
    responses: dict[str, Any] = field(default_factory=dict)
    invocation_state: dict[str, Any] = field(default_factory=dict)
    heartbeat_seconds: float = 10.0
    # The pipeline version the run was started with (``spec_hash``): a worker hosting another version
    # refuses its nodes. Empty: any version (runs started before the check existed).
    spec_hash: str = ""
    # Storage keys of the task and the invocation state, which ``start_run`` writes there so that the
    # history holds keys, not the data (empty: given by value above, as before).
    task_ref: str = ""
    invocation_state_ref: str = ""
    # Continue-as-new: the history's size at which the workflow hands the run to a new workflow run of
    # the same id (0: the spec's ``temporal: {continue_as_new: ...}``, or its defaults).
    max_history_events: int = 0
    max_history_bytes: int = 0
    # Set by the workflow when it continues as new: how many times the run did so before, and when the
    # run began (seconds since the epoch, for ``execution_timeout``). A continued run is read back from
    # the session, like a resume, but it is the same run: nothing about it changes for a user.
    continued: int = 0
    started_at: float = 0.0
    # The run's event inbox (``send_event`` signals not taken by a wait yet), carried by a continue-as-new.
    inbox: dict[str, Any] = field(default_factory=dict)
    # The run's budget (``Budget.to_json()``) in place of the spec's: ``orchestra run --on --budget-*``.
    budget: dict[str, Any] | None = None


@dataclass
class StateRequest:
    spec_id: str
    session_id: str
    storage: str
    scope_id: str


@dataclass
class NodeRequest:
    """Run one node (graph) or one turn (swarm) in an activity."""

    spec_id: str
    session_id: str
    storage: str
    scope_id: str
    run_id: str
    node_id: str
    execution_count: int
    activation: list[str] = field(default_factory=list)
    reset: bool = False
    prompt: Any = None
    responses: dict[str, Any] = field(default_factory=dict)
    invocation_state: dict[str, Any] = field(default_factory=dict)
    spec_hash: str = ""
    invocation_state_ref: str = ""
    # A swarm turn: the activity composes the prompt from the saved run and this activation (``{"node",
    # "input", "from"}``), so the task stays out of the history (``prompt``: histories recorded before).
    swarm_next: dict[str, Any] | None = None
    # A map node runs as activities too: "expand" (save the list, say how long it is), "item" (run item
    # ``map_item``), "finish" (the node's result from its items' saved results). Empty: any other node.
    map_phase: str = ""
    map_item: int = -1
    # A nested map's phase (``<node>:<index>``: the map that runs outer item ``index``, its list that item);
    # its "finish" gives the outer item's result. Empty: the node's own map.
    map_key: str = ""
    # A nested map's "finish": the items the workflow committed as completed (its result must hold them).
    map_done: list[int] = field(default_factory=list)
    # A run with a budget: the budget in effect (JSON) and the run's time so far (its wall_seconds).
    budget: dict[str, Any] | None = None
    elapsed_s: float = 0.0
    # The key of the workflow's last commit saved before it scheduled the node (``<commit id>#<version>``,
    # see ``_commits.py``): a worker whose copy of the run holds it reads nothing more. Empty (histories
    # recorded before): the node reads what was committed since its worker last read.
    after_commit: str = ""


@dataclass
class NodeOutcome:
    """What an activity tells the workflow about a node: its status and edges, not its data."""

    status: str
    blob: str
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    execution_time_ms: float = 0.0
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    fired: dict[str, bool] = field(default_factory=dict)
    handoff: dict[str, Any] | None = None
    preview: str = ""  # no longer filled (outputs stay in storage); kept so recorded histories still decode
    map_count: int = 0  # a map's "expand": how many items the saved list holds
    join_done: bool = False  # a map item: the map's ``until`` join holds with it
    spent: dict[str, Any] = field(default_factory=dict)  # a run with a budget: what the node spent


@dataclass
class CommitRequest:
    """Save the orchestrator's changes (and a node's data, from its blob) to the session journal."""

    session_id: str
    storage: str
    scope_id: str
    fields: dict[str, Any]
    logs: dict[str, list[Any]]
    unset: list[str] = field(default_factory=list)
    node_id: str | None = None
    node_kind: str | None = None
    blob: str | None = None
    task_ref: str | None = None  # the first commit of a run whose task is by reference stores it
    run_id: str = ""  # tells a retried commit whose blobs it already deleted that it has nothing to do
    # Nodes that finished together, as [node id, blob] pairs: one record for all, their data folded in
    # this order (``node_id``/``blob`` hold a single node, as in histories recorded before batches).
    batch: list[list[str]] = field(default_factory=list)
    # Unique per commit of a workflow run: saved with the commit (and the blobs it folded in), so a retry
    # of a commit that was saved folds in only the blobs it did not (a replayed workflow task's commit
    # can hold more) and deletes its inputs (empty in histories recorded before).
    commit_id: str = ""
    # Inputs the run no longer needs once this commit is saved (the last commit: the invocation state).
    delete: list[str] = field(default_factory=list)
    # The run's last commit: what is left in its folder (blobs of nodes whose results never came back,
    # as in a run that failed while others ran) goes too.
    ends_run: bool = False
    # A map's list, as [map key, blob] (its "expand"), and its items' results, as [map key, index, blob].
    map_list: list[str] = field(default_factory=list)
    map_items: list[list[Any]] = field(default_factory=list)
    # Logs sent as their new items only: ``{log: the index its items in logs start at}``. The items
    # before it are the ones committed (a whole log each commit would grow with the run).
    log_from: dict[str, int] = field(default_factory=dict)
    # The commit's version (``commit_version``: its digest chained to the workflow run's commits before
    # it), saved with it so a worker's copy of the run says which version of the commit it holds. Empty:
    # histories recorded before.
    version: str = ""
