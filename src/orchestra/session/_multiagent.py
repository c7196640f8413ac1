"""How session managers persist a Graph or Swarm: after every node, or at the end of the invocation."""

from __future__ import annotations

import functools
import weakref
from typing import Any, Literal, Protocol

import anyio

from orchestra._concurrency import held
from orchestra.errors import SessionError
from orchestra.hooks import HookRegistry, TurnCheckpoint
from orchestra.multiagent import (
    AfterMultiAgentInvocation,
    AfterNodeCall,
    BeforeMultiAgentInvocation,
    Orchestrator,
    Status,
)
from orchestra.session._commit import housekeeping
from orchestra.session._document import Document
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeKind
from orchestra.session._uuid7 import uuid7
from orchestra.session.run_folder import OpenTurns, open_turns, with_open_turns
from orchestra.storage import delete_many

__all__ = ["MultiAgentSaveLatestOn", "MultiAgentSnapshots", "OrchestratorPersistence", "SessionSettings"]

MultiAgentSaveLatestOn = Literal["node", "invocation"]
MultiAgentSnapshots = Literal["interrupt", "node", "none"]


class SessionSettings(Protocol):
    """What the multi-agent side reads of the session manager it serves (``SnapshotSessionManager``):
    the session, its journals, and how a Graph or Swarm is saved there."""

    @property
    def session_id(self) -> str: ...

    run_id: str | None
    multi_agent_save_latest_on: MultiAgentSaveLatestOn
    multi_agent_snapshots: MultiAgentSnapshots
    keep_snapshots: int | None

    def journal(self, kind: ScopeKind, scope_id: str) -> Journal: ...


class OrchestratorPersistence:
    """The multi-agent side of a ``SnapshotSessionManager``: one journal per orchestrator scope.

    The saved run is restored before the orchestrator's first invocation. Each save takes only what the
    orchestrator marked as changed (the node that finished, its agent, the counters), so a per-node save
    costs the same at the 200th node as at the first.
    """

    def __init__(self, manager: SessionSettings) -> None:
        self.manager = manager
        self._journals: weakref.WeakKeyDictionary[Orchestrator, Journal] = weakref.WeakKeyDictionary()
        self._locks: weakref.WeakKeyDictionary[Orchestrator, anyio.Lock] = weakref.WeakKeyDictionary()
        # The changes a failed save took from an orchestrator, for its next save to write.
        self._unsaved: weakref.WeakKeyDictionary[
            Orchestrator, tuple[dict[str, Any], dict[str, list[Any]], list[str]]
        ] = weakref.WeakKeyDictionary()

    def register(self, registry: HookRegistry) -> None:
        registry.add_callback(BeforeMultiAgentInvocation, self._before_invocation)
        registry.add_callback(AfterNodeCall, self._after_node)
        registry.add_callback(AfterMultiAgentInvocation, self._after_invocation)

    async def _before_invocation(self, event: BeforeMultiAgentInvocation) -> None:
        orchestrator = event.orchestrator
        if orchestrator in self._journals:
            return
        journal = self.manager.journal("multiAgent", orchestrator.scope_id)
        doc = await journal.load()
        left = OpenTurns()
        if doc is not None:
            # A run taken over from a stopped Temporal workflow: a worker's open turns are the latest.
            left = await open_turns(journal.storage, journal.layout, doc)
            if left.turns:
                doc = with_open_turns(doc, left.turns)
            orchestrator.document.load(doc.fields, doc.logs)
        self._journals[orchestrator] = journal
        self._locks[orchestrator] = anyio.Lock()
        for node_id, node in orchestrator.nodes.items():
            if node.kind == "agent":
                # A node's side-effecting tools make its open turn durable mid-node, in the run's journal.
                node.agent.bind_session(
                    f"{self.manager.session_id}/multiAgent/{orchestrator.scope_id}/{node_id}"
                )
                node.agent.hooks.add_callback(
                    TurnCheckpoint, functools.partial(self._node_turn, orchestrator, node_id)
                )
        if left.keys:
            for node_id in left.turns:
                node = orchestrator.nodes.get(node_id)
                if node is not None and node.kind == "agent":  # (another graph's node is no agent here)
                    orchestrator.document.mark_agent(node_id)
            await self.save(orchestrator)  # the journal holds the open turns now: their blobs can go
            await delete_many(journal.storage, left.keys)

    async def _node_turn(self, orchestrator: Orchestrator, node_id: str, event: TurnCheckpoint) -> None:
        orchestrator.document.mark_agent(node_id)
        await self.save(orchestrator)

    def journal_of(self, orchestrator: Orchestrator) -> Journal:
        journal = self._journals.get(orchestrator)
        if journal is None:
            raise SessionError(
                f"{orchestrator.kind} {orchestrator.id!r} has not run in session "
                f"{self.manager.session_id!r} yet: invoke it once (that loads its saved run) first"
            )
        return journal

    async def save(self, orchestrator: Orchestrator) -> None:
        # One save at a time: a node's tools may checkpoint its turn while the run saves another node.
        async with held(self._locks[orchestrator]):
            await self._save_locked(orchestrator)

    async def _save_locked(self, orchestrator: Orchestrator) -> None:
        journal = self._journals[orchestrator]
        journal.run_id = self.manager.run_id
        fields, logs, unset = orchestrator.document.take_changes()
        held = self._unsaved.pop(orchestrator, None)
        if held is not None:
            # What a failed save took is saved now, with what changed since (which is newer).
            fields, logs = {**held[0], **fields}, {**held[1], **logs}
            unset = sorted({*held[2], *unset} - set(fields))
        try:
            if journal.absent:
                await journal.create(Document(fields=fields, logs=logs))
            else:
                await journal.save(fields, logs, unset)
        except BaseException:
            self._unsaved[orchestrator] = (fields, logs, unset)
            raise

    async def _after_node(self, event: AfterNodeCall) -> None:
        orchestrator = event.orchestrator
        if self.manager.multi_agent_save_latest_on == "node" or self.manager.multi_agent_snapshots == "node":
            await self.save(orchestrator)  # the node's commit point
        if self.manager.multi_agent_snapshots == "node":
            # After the commit point: a failed immutable snapshot is logged, not raised.
            async with housekeeping(self.journal_of(orchestrator).layout, "snapshot the run after a node"):
                await self.snapshot(orchestrator, {"after_node": event.node_id})

    async def _after_invocation(self, event: AfterMultiAgentInvocation) -> None:
        orchestrator = event.orchestrator
        await self.save(orchestrator)  # the invocation's commit point
        result = event.result
        if self.manager.multi_agent_snapshots != "none" and result and result.status == Status.INTERRUPTED:
            interrupts = [i.id for i in result.interrupts]
            async with housekeeping(self.journal_of(orchestrator).layout, "snapshot the interrupted run"):
                await self.snapshot(orchestrator, {"interrupted": interrupts})

    async def snapshot(self, orchestrator: Orchestrator, app_data: dict[str, Any] | None = None) -> str:
        """Save, then take an immutable snapshot of the run and of its nested runs, under one new id."""
        snapshot_id = str(uuid7())
        for scope in orchestrator.orchestrators():
            journal = self._journals.get(scope)
            if journal is None or journal.absent:
                continue
            await self.save(scope)
            await journal.checkpoint(snapshot_id, app_data)
            if self.manager.keep_snapshots is not None:
                await journal.prune_checkpoints(keep=self.manager.keep_snapshots)
        return snapshot_id
