"""Where a session's data lives on any storage (the layout the seed documentation fixes, plus a journal).

::

    session/<session_id>/scopes/<agent|multiAgent>/<id>/
        snapshots/manifest.json                          schema_version, created_at, updated_at
        snapshots/snapshot_latest.json                   a full snapshot as of journal record N
        snapshots/snapshot_base.json                     a full snapshot as of record B: records <= B are deleted
        snapshots/immutable_history/snapshot_<uuid7>.json  a checkpoint: "the state after record M"
        journal/<seq, 12 digits>.json                    one record per save: only what changed, or
                                                         a segment of records seq, seq + 1, ... one a
                                                         line, where the storage appends (local files)
"""

from __future__ import annotations

from typing import Literal

from orchestra._ids import validate_id

__all__ = ["ScopeKind", "ScopeLayout", "session_prefix"]

ScopeKind = Literal["agent", "multiAgent"]


def session_prefix(session_id: str) -> str:
    return f"session/{validate_id(session_id, 'session_id')}/"


class ScopeLayout:
    """The keys of one scope (an agent, or a Graph/Swarm) inside one session."""

    def __init__(self, session_id: str, kind: ScopeKind, scope_id: str) -> None:
        what = "agent_id" if kind == "agent" else "orchestrator id"
        self.session_id = session_id
        self.kind = kind
        self.scope_id = validate_id(scope_id, what)
        self.prefix = f"{session_prefix(session_id)}scopes/{kind}/{scope_id}/"
        self.snapshots = f"{self.prefix}snapshots/"
        self.latest = f"{self.snapshots}snapshot_latest.json"
        self.base = f"{self.snapshots}snapshot_base.json"
        self.manifest = f"{self.snapshots}manifest.json"
        self.immutable = f"{self.snapshots}immutable_history/"
        self.journal = f"{self.prefix}journal/"

    def record(self, seq: int) -> str:
        return f"{self.journal}{seq:012d}.json"

    def seq_of(self, key: str) -> int:
        """The record a journal key holds (a segment: its first record)."""
        return int(key[len(self.journal) :].removesuffix(".json"))

    def immutable_snapshot(self, snapshot_id: str) -> str:
        return f"{self.immutable}snapshot_{snapshot_id}.json"

    def describe(self) -> str:
        return f"session {self.session_id!r} {self.kind} {self.scope_id!r}"
