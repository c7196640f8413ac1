"""A Temporal run's folder in its session, and the open turns its workers checkpointed there.

::

    session/<session_id>/scopes/multiAgent/<scope_id>/temporal/<run_id>/
        input-<name>.json              a run's input (its task, its invocation state)
        <node>-<execution>.json        what a node's activity did, until the workflow's commit folds it in
        <node>-<execution>-turn.json   an agent node's open turn, checkpointed by its side-effecting tools

While a run is on Temporal, the workflow's commit is the only journal writer: a node's activity keeps its
agent's open turn in a turn blob, and a retried attempt of the same execution resumes from it. Once the
workflow is stopped, a local resume takes the run over; the turn of an execution that never committed is
then the agent's latest state, so the resume folds it into the run it loaded (``with_open_turns``), saves
it to the journal, and deletes the turn blobs (``open_turns`` reads them). No temporalio here: the local
runner and the workers both use this layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestra._ids import validate_id
from orchestra.errors import SnapshotError
from orchestra.session._document import Document, decode_messages
from orchestra.session._layout import ScopeLayout
from orchestra.storage import Storage, read_many

__all__ = [
    "COMMIT_FIELD",
    "OpenTurns",
    "open_turns",
    "run_folder",
    "turn_key",
    "turns_to_resume",
    "with_open_turns",
]

COMMIT_FIELD = "temporal/commit"
"""The run document's field naming the last commit a workflow saved: a run that has it went through Temporal."""

_TURN = "-turn.json"


def run_folder(session_id: str, scope_id: str, run_id: str) -> str:
    """Where a Temporal run's inputs and its nodes' blobs wait for the commits that fold them in."""
    prefix = ScopeLayout(session_id, "multiAgent", scope_id).prefix
    return f"{prefix}temporal/{validate_id(run_id, 'run_id')}/"


def turn_key(session_id: str, scope_id: str, run_id: str, node_id: str, execution: int) -> str:
    """Where an agent node's open turn is checkpointed during one execution on a worker."""
    return f"{run_folder(session_id, scope_id, run_id)}{node_id}-{execution}{_TURN}"


@dataclass
class OpenTurns:
    """The turn blobs of a run's folder: the open turns to resume (by node: the blob's agent fields and
    messages), and every turn blob's key (all of them go once the turns are in the journal)."""

    turns: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)


def _uncommitted(doc: Document, node_id: str, execution: int) -> bool:
    """Whether execution ``execution`` of ``node_id`` is the node's latest and its result never committed
    (a worker was stopped in it): then its open turn is newer than the agent the journal holds."""
    record = doc.fields.get(f"node/{node_id}")
    if not isinstance(record, dict):
        return True
    result = record.get("result") or {}
    committed = int(result.get("execution_count") or 0)
    return execution > committed and execution >= int(record.get("executions") or 0)


def turns_to_resume(doc: Document, folder: str, keys: list[str]) -> dict[str, str]:
    """Of a run folder's turn blobs, the one to resume of each node (by node id): its newest execution's,
    if that execution never committed. No I/O."""
    latest: dict[str, tuple[int, str]] = {}
    for key in keys:
        node_id, _, number = key[len(folder) : -len(_TURN)].rpartition("-")
        execution = int(number) if number.isdigit() else 0
        if node_id and execution > latest.get(node_id, (0, ""))[0]:
            latest[node_id] = (execution, key)
    return {
        node_id: key for node_id, (execution, key) in latest.items() if _uncommitted(doc, node_id, execution)
    }


async def open_turns(storage: Storage, layout: ScopeLayout, doc: Document) -> OpenTurns:
    """The open turns a stopped Temporal run left in its folder (nothing for a run that never ran there).

    Raises:
        SnapshotError: a turn blob to resume is not one (its key is named).
    """
    run_id = (doc.fields.get("run") or {}).get("run_id")
    if COMMIT_FIELD not in doc.fields or not run_id:
        return OpenTurns()
    folder = run_folder(layout.session_id, layout.scope_id, str(run_id))
    keys = [key for key in await storage.list(folder) if key.endswith(_TURN)]
    wanted = turns_to_resume(doc, folder, keys)
    turns: dict[str, dict[str, Any]] = {}
    for (node_id, key), found in zip(
        wanted.items(), await read_many(storage, list(wanted.values())), strict=True
    ):
        if found is None:  # deleted since it was listed (by another resume): nothing to resume
            continue
        try:
            blob = json.loads(found[0])
            turns[node_id] = {"agent": blob["agent"], "messages": decode_messages(blob["messages"], key)}
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotError(
                f"{key}: node {node_id!r}'s open turn, checkpointed by a Temporal worker, is damaged "
                f"({type(exc).__name__}: {exc}); delete it to start the node's turn again"
            ) from None
    return OpenTurns(turns, keys)


def with_open_turns(doc: Document, turns: dict[str, dict[str, Any]]) -> Document:
    """``doc`` with each node's agent as its open turn left it (``open_turns``). No I/O."""
    fields, logs = dict(doc.fields), dict(doc.logs)
    for node_id, turn in turns.items():
        fields[f"agent/{node_id}"] = turn["agent"]
        logs[f"agent/{node_id}/messages"] = turn["messages"]
    return Document(fields=fields, logs=logs, origins=doc.origins)
