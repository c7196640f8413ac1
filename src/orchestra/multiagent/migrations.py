"""Runs pinned to their version, and the migrations that carry a saved run over to a changed graph.

Every run records what it started on: the orchestrator's ``version`` (given by the user: ``Graph(...,
version="v2")``, YAML ``pipeline_version:``), its topology hash, and the topology itself (nodes and
their kinds, edges and their conditions, joins, entry points; the ``topology`` field of the run
document, written once per session while the graph stays the same).

On resume, in this order:

1. The run was saved on another version and a migration is registered for that version
   (``migrations={"v1": fn}``): ``fn(run)`` rewrites the saved run (a ``SavedRun``: rename or remove a
   node, reshape the state, edit any field) before it continues. A migration may return the version it
   produced, and the migration registered for that one runs next (v1 -> v2 -> v3); otherwise the run is
   now on the current version. What ran is recorded in the run (``run.migrations``).
2. Otherwise the topology must be the one the run was saved with, or the resume is refused with a
   ``RunError`` that names what changed: nodes added, removed or renamed, their kinds, edges, joins,
   conditions and entry points. ``force_resume=True`` resumes anyway.

A migration changes only the saved document; the nodes that completed stay completed under their new
names, so they do not run again.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestra.errors import RunError
from orchestra.multiagent._run_document import RunDocument

__all__ = [
    "Migration",
    "Pipeline",
    "SavedRun",
    "carry_over",
    "describe_changes",
    "document_changes",
    "migrate_document",
]


class SavedRun:
    """A saved run as a migration sees it: the run document's fields and logs, editable.

    The fields are those of the run document (``run``, ``task``, ``state``, ``node/<id>``,
    ``agent/<id>``, ``map/<id>...``, a swarm's ``next`` and ``shared_context``); the logs are
    ``execution_order``, ``agent/<id>/messages`` and a swarm's ``node_history`` and ``handoffs``.
    """

    def __init__(self, fields: dict[str, Any], logs: dict[str, list[Any]]) -> None:
        self.fields = fields
        self.logs = logs

    @property
    def version(self) -> str | None:
        """The version the run was saved on (None: a run saved without one)."""
        return (self.fields.get("run") or {}).get("version")

    @property
    def state(self) -> dict[str, Any]:
        """The orchestrator's shared state (changes to this dict are kept)."""
        state = self.fields.get("state")
        if not isinstance(state, dict):
            state = self.fields["state"] = {}
        return state

    @property
    def node_ids(self) -> list[str]:
        """The nodes the saved run has a record of."""
        return sorted(name[len("node/") :] for name in self.fields if name.startswith("node/"))

    def node(self, node_id: str) -> dict[str, Any] | None:
        """A node's record (``status``, ``executions``, ``result``, ...), or None."""
        record = self.fields.get(f"node/{node_id}")
        return record if isinstance(record, dict) else None

    def rename_node(self, old: str, new: str) -> None:
        """Give node ``old`` the id ``new`` everywhere in the run: its record, its agent's state and
        conversation, its map items, the edges other nodes recorded from it, the execution order, a
        swarm's next agent, handoffs and shared context.

        Raises:
            RunError: the run has no node ``old``, or already one named ``new``.
        """
        if self.node(old) is None and f"agent/{old}" not in self.fields:
            raise RunError(
                f"migration: the saved run has no node {old!r} (its nodes: {', '.join(self.node_ids)})"
            )
        if self.node(new) is not None:
            raise RunError(f"migration: cannot rename {old!r} to {new!r}: the saved run already has {new!r}")

        def renamed(name: str) -> str:
            for prefix in ("node/", "agent/", "map/"):
                if name.startswith(f"{prefix}{old}"):
                    rest = name[len(prefix) + len(old) :]
                    if rest == "" or rest[0] in "/:":
                        return f"{prefix}{new}{rest}"
            return name

        self.fields = {renamed(name): value for name, value in self.fields.items()}
        self.logs = {renamed(name): items for name, items in self.logs.items()}
        swap = {old: new}
        for record in self._records():
            if isinstance(record.get("incoming"), dict):
                record["incoming"] = {swap.get(k, k): v for k, v in record["incoming"].items()}
            for key in ("activation", "back"):
                if isinstance(record.get(key), list):
                    record[key] = [swap.get(n, n) for n in record[key]]
        for log in ("execution_order", "node_history"):
            if log in self.logs:
                self.logs[log] = [swap.get(n, n) for n in self.logs[log]]
        if "handoffs" in self.logs:
            self.logs["handoffs"] = [
                {
                    **h,
                    "from": swap.get(h.get("from"), h.get("from")),
                    "to": swap.get(h.get("to"), h.get("to")),
                }
                for h in self.logs["handoffs"]
            ]
        following = self.fields.get("next")
        if isinstance(following, dict):
            self.fields["next"] = {
                **following,
                **{key: new for key in ("node", "from") if following.get(key) == old},
            }
        shared = self.fields.get("shared_context")
        if isinstance(shared, dict) and old in shared:
            self.fields["shared_context"] = {swap.get(k, k): v for k, v in shared.items()}
        if self.fields.get("last_active") == old:
            self.fields["last_active"] = new
        run = self.fields.get("run")
        if isinstance(run, dict) and run.get("current") == old:
            run["current"] = new

    def remove_node(self, node_id: str) -> None:
        """Forget node ``node_id``: its record, agent state, conversation and map items, and the edges
        other nodes recorded from it (a join no longer waits for it). The execution order keeps it."""
        gone = (f"node/{node_id}", f"agent/{node_id}")
        self.fields = {
            name: value
            for name, value in self.fields.items()
            if name not in gone and not _under(name, f"map/{node_id}")
        }
        self.logs.pop(f"agent/{node_id}/messages", None)
        for record in self._records():
            if isinstance(record.get("incoming"), dict):
                record["incoming"] = {k: v for k, v in record["incoming"].items() if k != node_id}
            for key in ("activation", "back"):
                if isinstance(record.get(key), list):
                    record[key] = [n for n in record[key] if n != node_id]

    def _records(self) -> list[dict[str, Any]]:
        return [v for k, v in self.fields.items() if k.startswith("node/") and isinstance(v, dict)]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith((f"{prefix}/", f"{prefix}:"))


Migration = Callable[[SavedRun], str | None]
"""``fn(run)``: rewrite the saved run in place; return the version it is now on (None: the current one)."""


def migrate_document(
    fields: Mapping[str, Any],
    logs: Mapping[str, list[Any]],
    migrations: Mapping[str, Migration],
    current: str | None,
    what: str,
) -> tuple[dict[str, Any], dict[str, list[Any]], list[dict[str, Any]]]:
    """Apply the migrations registered for the run's version, in a chain, to a copy of the document.

    Returns the migrated fields and logs and what ran (``[{"from": "v1", "to": "v2"}, ...]``; empty when
    no migration is registered for the run's version).

    Raises:
        RunError: a migration raised (named, with its error), or the chain loops.
    """
    run = SavedRun(copy.deepcopy(dict(fields)), copy.deepcopy({k: list(v) for k, v in logs.items()}))
    applied: list[dict[str, Any]] = []
    version = run.version
    seen: set[str | None] = set()
    while version != current and version in migrations:
        if version in seen:
            raise RunError(f"{what}: the migrations loop (version {version!r} again after {applied})")
        seen.add(version)
        fn = migrations[version]  # type: ignore[index]
        try:
            produced = fn(run)
        except RunError:
            raise
        except Exception as exc:
            name = getattr(fn, "__qualname__", repr(fn))
            raise RunError(
                f"{what}: the migration from version {version!r} ({name}) raised {type(exc).__name__}: {exc}; "
                "the saved run was not changed"
            ) from exc
        target = current if produced is None else str(produced)
        applied.append({"from": version, "to": target})
        run_record = run.fields.setdefault("run", {})
        run_record["version"] = target
        version = target
    return run.fields, run.logs, applied


def _edges(topology: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    return {(src, dst): condition for src, dst, condition in topology.get("edges", [])}


def _renames(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, str]:
    """Removed nodes that look renamed: exactly one added node of the same kind has all their edges."""
    old_nodes, new_nodes = saved.get("nodes", {}), current.get("nodes", {})
    removed = [n for n in old_nodes if n not in new_nodes]
    added = [n for n in new_nodes if n not in old_nodes]
    old_edges, new_edges = set(_edges(saved)), set(_edges(current))
    found: dict[str, str] = {}
    for old in removed:
        matches = []
        for new in added:
            if old_nodes[old] != new_nodes[new] or new in found.values():
                continue
            moved = {(new if s == old else s, new if d == old else d) for s, d in old_edges if old in (s, d)}
            touching = {(s, d) for s, d in new_edges if new in (s, d)}
            if moved and moved <= touching:  # its edges, under the new name (it may have gained some)
                matches.append(new)
        if len(matches) == 1:
            found[old] = matches[0]
    return found


def describe_changes(saved: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """What differs between the topology a run was saved with and the current one, one phrase each."""
    if not saved:
        return ["the saved run predates recorded topologies, so what changed cannot be listed"]
    changes: list[str] = []
    old_nodes, new_nodes = saved.get("nodes", {}), current.get("nodes", {})
    renames = _renames(saved, current)
    for old, new in sorted(renames.items()):
        changes.append(f"node {old!r} renamed to {new!r}")
    removed = sorted(n for n in old_nodes if n not in new_nodes and n not in renames)
    added = sorted(n for n in new_nodes if n not in old_nodes and n not in renames.values())
    if removed:
        changes.append(f"nodes removed: {', '.join(removed)}")
    if added:
        changes.append(f"nodes added: {', '.join(added)}")
    for node_id in sorted(set(old_nodes) & set(new_nodes)):
        if old_nodes[node_id] != new_nodes[node_id]:
            changes.append(f"node {node_id!r} is now a {new_nodes[node_id]} (was a {old_nodes[node_id]})")
    swap = renames.get
    old_edges = {(swap(s, s), swap(d, d)): c for (s, d), c in _edges(saved).items()}
    new_edges = _edges(current)
    gone = sorted(e for e in old_edges if e not in new_edges)
    came = sorted(e for e in new_edges if e not in old_edges)
    if gone:
        changes.append("edges removed: " + ", ".join(f"{s} -> {d}" for s, d in gone))
    if came:
        changes.append("edges added: " + ", ".join(f"{s} -> {d}" for s, d in came))
    for edge in sorted(set(old_edges) & set(new_edges)):
        if old_edges[edge] != new_edges[edge]:
            was, now = old_edges[edge] or "none", new_edges[edge] or "none"
            changes.append(f"the condition of edge {edge[0]} -> {edge[1]} changed ({was} -> {now})")
    old_joins = {swap(n, n): j for n, j in (saved.get("joins") or {}).items()}
    for node_id, join in sorted((current.get("joins") or {}).items()):
        if node_id in old_joins and old_joins[node_id] != join:
            changes.append(f"the join of {node_id!r} changed ({old_joins[node_id]} -> {join})")
    old_maps = {swap(n, n): m for n, m in (saved.get("maps") or {}).items()}
    for node_id, spec in sorted((current.get("maps") or {}).items()):
        if node_id in old_maps and old_maps[node_id] != spec:
            changes.append(
                f"the map of {node_id!r} changed ({json.dumps(old_maps[node_id])} -> {json.dumps(spec)})"
            )
    for key in ("entry_points", "entry_point"):
        before: Any = saved.get(key)
        if isinstance(before, list):
            before = sorted(swap(n, n) for n in before)
        elif isinstance(before, str):
            before = swap(before, before)
        if key in current and before != current[key]:
            changes.append(f"{key.replace('_', ' ')} changed ({before} -> {current[key]})")
    return changes or ["the topology hash differs, but no node, edge, join or condition did"]


def document_changes(
    before: tuple[Mapping[str, Any], Mapping[str, list[Any]]],
    after: tuple[Mapping[str, Any], Mapping[str, list[Any]]],
) -> list[str]:
    """What a migration did to a run document, one phrase per field or log (for ``sessions migrate``)."""
    out: list[str] = []
    for kind, old, new in (("field", before[0], after[0]), ("log", before[1], after[1])):
        for name in sorted(set(old) - set(new)):
            out.append(f"{kind} {name} removed")
        for name in sorted(set(new) - set(old)):
            out.append(f"{kind} {name} added")
        for name in sorted(set(old) & set(new)):
            if json.dumps(old[name], sort_keys=True, default=str) != json.dumps(
                new[name], sort_keys=True, default=str
            ):
                out.append(f"{kind} {name} changed")
    return out


@dataclass(frozen=True)
class Pipeline:
    """What a saved run is carried over to: the orchestrator as it is now (see ``carry_over``)."""

    what: str  # how messages name it: "graph 'review'"
    version: str | None
    migrations: Mapping[str, Migration]
    topology: dict[str, Any]
    hashes: tuple[str, ...]  # the topology hashes a saved run may carry (the current one first)
    node_ids: frozenset[str]


def carry_over(document: RunDocument, pipeline: Pipeline, force: bool) -> list[dict[str, Any]]:
    """Before a resume: migrate a run saved on another version (returns the steps that ran), or refuse
    one saved by another graph, naming what changed, unless ``force``.

    Raises:
        RunError: a migration failed or left nodes the graph does not have; or the run was saved by
            another graph and no migration is registered for its version.
    """
    what = pipeline.what
    saved = document.run.get("version")
    if saved != pipeline.version and saved in pipeline.migrations:
        fields, logs = document.whole()
        fields, logs, applied = migrate_document(fields, logs, pipeline.migrations, pipeline.version, what)
        document.replace(fields, logs)
        document.update_run(
            topology=pipeline.hashes[0],
            migrations=[*(document.run.get("migrations") or []), *applied],
        )
        document.set("topology", pipeline.topology)
        stale = sorted(n for n in document.node_ids() if n not in pipeline.node_ids)
        if stale:
            raise RunError(
                f"{what}: after the migration from version {saved!r} the run still has nodes the graph "
                f"does not: {', '.join(stale)}; rename or remove them in the migration "
                "(run.rename_node(old, new), run.remove_node(id))"
            )
        return applied
    if document.run.get("topology") in pipeline.hashes or force:
        return []
    changes = describe_changes(document.field("topology"), pipeline.topology)
    hint = (
        f"register a migration for version {saved!r} (migrations={{{saved!r}: fn}}, YAML migrations:)"
        if saved is not None
        else "give the graph a version= and register migrations for the next change"
    )
    raise RunError(
        f"{what}: the saved run was made by a different graph ({'; '.join(changes)}); resuming could "
        f"skip or repeat the wrong nodes. To carry it over, {hint}; or pass force_resume=True "
        "(orchestra resume --force) to resume anyway, or delete the session to start over"
    )
