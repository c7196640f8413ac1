"""``SnapshotSessionManager``: persists agents (and Graph/Swarm orchestrators) as journaled snapshots."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio

from orchestra._concurrency import held
from orchestra._ids import validate_id
from orchestra.agent import Agent, AgentData, AgentLike
from orchestra.errors import SessionError, SnapshotError
from orchestra.hooks import (
    AfterInvocation,
    AgentInitialized,
    HookRegistry,
    MessageAdded,
    MessageRedacted,
    TurnCheckpoint,
)
from orchestra.messages import MessageDict
from orchestra.multiagent.base import MultiAgentBase
from orchestra.session._commit import housekeeping
from orchestra.session._document import Document
from orchestra.session._erase import erase_session
from orchestra.session._journal import Compaction, Journal
from orchestra.session._layout import ScopeKind, ScopeLayout
from orchestra.session._multiagent import MultiAgentSaveLatestOn, MultiAgentSnapshots, OrchestratorPersistence
from orchestra.session._uuid7 import uuid7
from orchestra.storage import LocalFileStorage, Storage

__all__ = [
    "DROPPED_MESSAGES",
    "MultiAgentSaveLatestOn",
    "MultiAgentSnapshots",
    "SaveLatestOn",
    "SnapshotSessionManager",
    "export_scope",
    "whole_conversation",
]

SaveLatestOn = Literal["message", "invocation", "trigger"]
SnapshotTrigger = Callable[..., bool]


def agent_document(data: AgentData) -> Document:
    """An agent's persisted form: its fields and its message log."""
    return Document(
        fields={
            "state": data.state,
            "conversation_manager_state": data.conversation_manager_state,
            "system_prompt": data.system_prompt,
            "interrupt_state": data.interrupt_state,
        },
        logs={"messages": data.messages},
    )


DROPPED_MESSAGES = "dropped/messages"
"""The log of the messages a conversation manager took out of an agent's history, kept with
``keep_dropped_messages=True``: stored and readable, never given to the model."""

_AGENT_FIELDS = {"state", "conversation_manager_state", "system_prompt", "interrupt_state"}
_AGENT_LOGS = {"messages", DROPPED_MESSAGES}
_AGENT_NAMES = frozenset({*_AGENT_FIELDS, *_AGENT_LOGS})
_INTERRUPT_KEYS = {"tool_uses", "completed", "interrupts"}


def _check_agent_document(doc: Document, where: str) -> None:
    """Refuse what is not an orchestra agent document, naming the field and the file it came from,
    instead of loading it half."""
    unknown = sorted(set(doc.fields) - _AGENT_FIELDS) + sorted(set(doc.logs) - _AGENT_LOGS)
    interrupt_state = doc.fields.get("interrupt_state")
    if interrupt_state is not None and (
        not isinstance(interrupt_state, dict) or not set(interrupt_state) >= _INTERRUPT_KEYS
    ):
        unknown.append("interrupt_state")
    if not unknown:
        return
    origin = doc.origins.get(unknown[0])
    if origin is not None and "/journal/" in origin:
        # A journal record is only ever written by orchestra: an unknown name in one is damage.
        raise SnapshotError(
            f"{origin}: field or log {unknown[0]!r} is not one an orchestra agent saves ({where}): the "
            "record is damaged. Nothing was loaded; restore the session from an export or an immutable "
            "snapshot"
        )
    raise SnapshotError(
        f"{origin or where}: field(s) {', '.join(unknown)} are not an orchestra agent snapshot's (a Strands "
        "Agents session, or a newer orchestra?). Nothing was loaded; to bring a Strands snapshot over, run "
        "'orchestra sessions import <its snapshot_latest.json> --from strands' into another session id"
    )


def whole_conversation(doc: Document) -> tuple[list[Any], int]:
    """An agent document's whole conversation (the dropped messages, then the history) and where the
    history, what the model is given, starts in it."""
    dropped = list(doc.logs.get(DROPPED_MESSAGES, []))
    return [*dropped, *doc.logs.get("messages", [])], len(dropped)


def agent_data_of(doc: Document, default_system_prompt: str | None = None) -> AgentData:
    fields = doc.fields
    return AgentData(
        messages=list(doc.logs.get("messages", [])),
        state=fields.get("state") or {},
        conversation_manager_state=fields.get("conversation_manager_state") or {},
        system_prompt=fields.get("system_prompt", default_system_prompt),
        interrupt_state=fields.get("interrupt_state"),
    )


class _AgentBinding:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.state_version = -1
        self.lock = anyio.Lock()  # one save at a time: a turn's tools may checkpoint it concurrently


class SnapshotSessionManager:
    """Keeps an agent's (or an orchestrator's) state in storage and restores it on the next start.

    Args:
        session_id: the session (letters, digits, ``._-``, 1-128 characters).
        storage: where to keep it; defaults to ``LocalFileStorage("./.orchestra/")``.
        save_latest_on: for agents: ``"message"`` (after every added message and at the end of each
            invocation), ``"invocation"`` (at the end of each invocation) or ``"trigger"`` (only when
            ``snapshot_trigger`` fires or ``save_snapshot`` is called). A redacted message is saved at
            once under every strategy.
        snapshot_trigger: ``fn(*, agent_data, **_) -> bool``, asked at the end of every invocation; when
            it returns True an immutable snapshot is taken.
        multi_agent_save_latest_on: for a Graph or Swarm: ``"node"`` (after every node and at the end of
            the invocation) or ``"invocation"`` (only at the end).
        compaction: when the journal is folded into ``snapshot_latest.json``.
        keep_dropped_messages: keep the messages an agent's conversation manager takes out of its
            history (a sliding window's oldest turns) in the session's ``dropped/messages`` log: stored,
            readable (``whole_conversation``), never given to the model. ``orchestra serve`` turns it on.
        keep_snapshots: keep only the newest N immutable snapshots of each scope (older ones are deleted
            whenever a new one is taken); None keeps them all.
        multi_agent_snapshots: when a Graph or Swarm run gets an immutable snapshot on its own:
            ``"interrupt"`` (every time it stops for a human; the default), ``"node"`` (after every node
            too) or ``"none"``. ``save_run_snapshot`` takes one on request.

    Every save is conditional: a second live writer of the same session and agent (another process, or a
    second agent object with the same ids) gets ``SessionConflictError`` instead of overwriting turns.
    """

    def __init__(
        self,
        session_id: str,
        storage: Storage | None = None,
        save_latest_on: SaveLatestOn = "invocation",
        snapshot_trigger: SnapshotTrigger | None = None,
        multi_agent_save_latest_on: MultiAgentSaveLatestOn = "node",
        compaction: Compaction | None = None,
        multi_agent_snapshots: MultiAgentSnapshots = "interrupt",
        keep_snapshots: int | None = None,
        keep_dropped_messages: bool = False,
    ) -> None:
        self._session_id = validate_id(session_id, "session_id")
        if save_latest_on not in ("message", "invocation", "trigger"):
            raise ValueError(
                f"save_latest_on must be 'message', 'invocation' or 'trigger', not {save_latest_on!r}"
            )
        if multi_agent_save_latest_on not in ("node", "invocation"):
            raise ValueError(
                f"multi_agent_save_latest_on must be 'node' or 'invocation', not {multi_agent_save_latest_on!r}"
            )
        self.storage: Storage = storage if storage is not None else LocalFileStorage("./.orchestra/")
        self.save_latest_on = save_latest_on
        self.snapshot_trigger = snapshot_trigger
        self.multi_agent_save_latest_on = multi_agent_save_latest_on
        self.compaction = compaction or Compaction()
        if multi_agent_snapshots not in ("interrupt", "node", "none"):
            raise ValueError(
                f"multi_agent_snapshots must be 'interrupt', 'node' or 'none', not {multi_agent_snapshots!r}"
            )
        self.multi_agent_snapshots = multi_agent_snapshots
        if keep_snapshots is not None and keep_snapshots < 0:
            raise ValueError(f"keep_snapshots must be 0 or more, not {keep_snapshots}")
        self.keep_snapshots = keep_snapshots
        self.keep_dropped_messages = keep_dropped_messages
        self._agents: weakref.WeakKeyDictionary[AgentLike, _AgentBinding] = weakref.WeakKeyDictionary()
        self._orchestrators: OrchestratorPersistence | None = None
        self.run_id: str | None = None
        """Written into every journal record this manager saves while set (``orchestra serve`` sets its run
        id for the turn), so that whether a run stored its turn can be read from the session itself; the
        record of a turn's commit point also says how it ended (``Record.end``)."""
        self.before_save: Callable[[], Awaitable[None]] | None = None
        """Awaited before every save while set (``orchestra serve`` waits there for the turn's run record,
        written meanwhile, so that a stored turn always has its record); an error it raises fails the
        save before anything is stored."""
        self.recheck_after: float | None = None
        """Seconds after which an idle agent reads its last journal record back before its next save
        (see ``Journal.recheck_after``), sooner than its compaction's rule. A deletion needs no recheck
        (it leaves a tombstone where the next save goes); ``is_current`` checks before a use."""

    @property
    def session_id(self) -> str:
        return self._session_id

    def __repr__(self) -> str:
        return f"SnapshotSessionManager(session_id={self._session_id!r}, storage={self.storage!r})"

    def journal(self, kind: ScopeKind, scope_id: str) -> Journal:
        """A journal over one scope of this session."""
        return Journal(self.storage, ScopeLayout(self._session_id, kind, scope_id), self.compaction)

    # -- agent hooks ----------------------------------------------------------------------------------

    def register_hooks(self, registry: HookRegistry) -> None:
        registry.add_callback(AgentInitialized, self._on_initialized)
        registry.add_callback(MessageAdded, self._on_message_added)
        registry.add_callback(MessageRedacted, self._on_message_redacted)
        registry.add_callback(AfterInvocation, self._on_after_invocation)
        registry.add_callback(TurnCheckpoint, self._on_turn_checkpoint)

    def register_multi_agent_hooks(self, registry: HookRegistry) -> None:
        """Persist a Graph or Swarm (called when the orchestrator gets this session manager)."""
        if self._orchestrators is None:
            self._orchestrators = OrchestratorPersistence(self)
        self._orchestrators.register(registry)

    async def _on_initialized(self, event: AgentInitialized) -> None:
        agent = event.agent
        journal = self.journal("agent", agent.agent_id)
        journal.known_names = _AGENT_NAMES.__contains__
        journal.recheck_after = self.recheck_after
        binding = _AgentBinding(journal)
        doc = await journal.load()
        if doc is None:
            await journal.create(agent_document(agent.agent_data()))
        else:
            _check_agent_document(doc, journal.layout.describe())
            try:
                agent.load_agent_data(agent_data_of(doc, agent.system_prompt))
            except SnapshotError as exc:
                raise SnapshotError(f"{journal.layout.describe()}: {exc}") from None
        # Its tool calls' keys come from its scope; what the conversation manager cuts goes in a kept list.
        kept: list[MessageDict] | None = None
        if self.keep_dropped_messages:
            kept = list(doc.logs.get(DROPPED_MESSAGES, [])) if doc is not None else []
        agent.bind_session(self._scope_of(agent), dropped_messages=kept)
        binding.state_version = agent.state.version
        self._agents[agent] = binding

    def _scope_of(self, agent: AgentLike) -> str:
        return f"{self._session_id}/agent/{agent.agent_id}"

    def _binding(self, agent: AgentLike) -> _AgentBinding:
        if not isinstance(agent, Agent):
            raise SessionError(
                f"{type(agent).__name__} is not an Agent: for a Graph or Swarm use save_run_snapshot, "
                "list_run_snapshots and restore_run_snapshot"
            )
        binding = self._agents.get(agent)
        if binding is None:
            raise SessionError(
                f"agent {agent.name!r} is not attached to session {self._session_id!r}: pass "
                "Agent(session_manager=...) so the session is loaded when the agent is created"
            )
        return binding

    async def _save(self, agent: AgentLike, end: str | None = None) -> bool:
        binding = self._binding(agent)
        async with held(binding.lock):
            return await self._save_locked(agent, binding, end)

    async def _save_locked(self, agent: AgentLike, binding: _AgentBinding, end: str | None = None) -> bool:
        if self.before_save is not None:
            await self.before_save()
        data = agent.agent_data()
        fields: dict[str, Any] = {
            "conversation_manager_state": data.conversation_manager_state,
            "system_prompt": data.system_prompt,
            "interrupt_state": data.interrupt_state,
        }
        if agent.state.version != binding.state_version:
            fields["state"] = data.state
        logs: dict[str, list[Any]] = {"messages": data.messages}
        if agent.dropped_messages is not None and self.keep_dropped_messages:
            logs[DROPPED_MESSAGES] = list(agent.dropped_messages)
        binding.journal.run_id = self.run_id
        saved = await binding.journal.save(fields, logs, end=end)
        binding.state_version = agent.state.version
        return saved

    async def _on_turn_checkpoint(self, event: TurnCheckpoint) -> None:
        # Whatever save_latest_on says: a side-effecting tool's turn must be durable (its ledger).
        await self._save(event.agent)

    async def _on_message_added(self, event: MessageAdded) -> None:
        if self.save_latest_on == "message":
            await self._save(event.agent)

    async def _on_message_redacted(self, event: MessageRedacted) -> None:
        await self._save(event.agent)
        if event.previous is not None:
            # The save wrote the redacted version; earlier records and snapshots still hold the original.
            await self._binding(event.agent).journal.redact(event.previous, event.message)

    async def _on_after_invocation(self, event: AfterInvocation) -> None:
        agent = event.agent
        if event.exception is not None:
            # The failed turn was rolled back in memory; records a per-message save wrote of it are
            # dropped by this save, or else by the next one (a load also drops a turn left open).
            if self.save_latest_on != "trigger":
                async with housekeeping(self._binding(agent).journal.layout, "drop a failed turn's records"):
                    await self._save(agent)
            return
        triggered = self.snapshot_trigger is not None and self.snapshot_trigger(agent_data=agent.agent_data())
        if self.save_latest_on != "trigger" or triggered:
            # The turn's commit point. A run's record says how it ended (Record.end), so that whoever
            # reads the session knows at once what its run was answered.
            ended = None
            if self.run_id is not None:
                interrupted = event.result is not None and event.result.stop_reason == "interrupt"
                ended = "interrupted" if interrupted else "completed"
            await self._save(agent, ended)
            event.stored = True
        if triggered:
            journal = self._binding(agent).journal
            async with housekeeping(journal.layout, "take the immutable snapshot snapshot_trigger asked for"):
                await self._checkpoint(agent)

    # -- snapshots ------------------------------------------------------------------------------------

    async def save_snapshot(
        self, agent: Agent, is_latest: bool = True, app_data: dict[str, Any] | None = None
    ) -> str:
        """Save the agent now; with ``is_latest=False`` also take an immutable snapshot and return its id.

        For a Graph or Swarm use ``save_run_snapshot``.

        Returns:
            the immutable snapshot's UUIDv7, or ``"latest"``.
        """
        await self._save(agent)
        if is_latest:
            return "latest"
        return await self._checkpoint(agent, app_data)

    async def _checkpoint(self, agent: AgentLike, app_data: dict[str, Any] | None = None) -> str:
        snapshot_id = str(uuid7())
        journal = self._binding(agent).journal
        await journal.checkpoint(snapshot_id, app_data)
        if self.keep_snapshots is not None:
            await journal.prune_checkpoints(keep=self.keep_snapshots)
        return snapshot_id

    async def list_snapshot_ids(
        self, agent: Agent, limit: int | None = None, start_after: str | None = None
    ) -> list[str]:
        """The agent's immutable snapshot ids, oldest first."""
        layout = self._binding(agent).journal.layout
        start = layout.immutable_snapshot(start_after) if start_after else None
        keys = await self.storage.list(layout.immutable, start_after=start, limit=limit)
        return [k[len(layout.immutable) :].removeprefix("snapshot_").removesuffix(".json") for k in keys]

    async def restore_snapshot(self, agent: Agent, snapshot_id: str | None = None) -> None:
        """Put the agent back to an immutable snapshot (or, with no id, to the latest saved state).

        The restored state becomes the latest at the next save; the journal keeps the history in between.
        """
        journal = self._binding(agent).journal
        if snapshot_id is None:
            doc = await journal.load_at(journal.seq)
        else:
            validate_id(snapshot_id, "snapshot_id")
            doc, _ = await journal.read_checkpoint(snapshot_id)
        agent.load_agent_data(agent_data_of(doc, agent.system_prompt))
        if self.keep_dropped_messages:
            agent.bind_session(
                self._scope_of(agent), dropped_messages=list(doc.logs.get(DROPPED_MESSAGES, []))
            )

    # -- orchestrator time travel ---------------------------------------------------------------------

    def _persistence(self, orchestrator: MultiAgentBase) -> OrchestratorPersistence:
        if self._orchestrators is None or not isinstance(orchestrator, MultiAgentBase):
            raise SessionError(
                f"{orchestrator!r} is not a Graph or Swarm of session {self._session_id!r}; for an agent use "
                "save_snapshot / list_snapshot_ids / restore_snapshot"
            )
        return self._orchestrators

    async def save_run_snapshot(
        self, orchestrator: MultiAgentBase, app_data: dict[str, Any] | None = None
    ) -> str:
        """Take an immutable snapshot of a Graph or Swarm run (and its nested runs); returns its id."""
        persistence = self._persistence(orchestrator)
        persistence.journal_of(orchestrator)
        return await persistence.snapshot(orchestrator, app_data)

    async def list_run_snapshots(self, orchestrator: MultiAgentBase) -> list[str]:
        """The run's immutable snapshot ids, oldest first."""
        journal = self._persistence(orchestrator).journal_of(orchestrator)
        keys = await self.storage.list(journal.layout.immutable)
        return [
            k[len(journal.layout.immutable) :].removeprefix("snapshot_").removesuffix(".json") for k in keys
        ]

    async def restore_run_snapshot(self, orchestrator: MultiAgentBase, snapshot_id: str) -> None:
        """Put the run back to a snapshot: it becomes the latest state, and the next invocation resumes
        from there (the journal keeps what came between)."""
        journal = self._persistence(orchestrator).journal_of(orchestrator)
        validate_id(snapshot_id, "snapshot_id")
        doc, _ = await journal.read_checkpoint(snapshot_id)
        current = journal.current()
        removed = [name for name in current.fields if name not in doc.fields]
        logs = {name: doc.logs.get(name, []) for name in {*current.logs, *doc.logs}}
        await journal.save(doc.fields, logs, removed)
        orchestrator.document.load(doc.fields, doc.logs)

    async def fork(
        self, orchestrator: MultiAgentBase, new_session_id: str, snapshot_id: str | None = None
    ) -> list[str]:
        """Copy the run (at a snapshot, or as it is now) into a new session; see ``fork_scope``."""
        from orchestra.session.transfer import fork_scope

        self._persistence(orchestrator).journal_of(orchestrator)
        return await fork_scope(
            self.storage, self._session_id, "multiAgent", orchestrator.scope_id, new_session_id, snapshot_id
        )

    async def is_current(self, agent: Agent) -> bool:
        """Whether the agent still holds its session as stored: nothing was saved to it since by another
        process or server, and it was not deleted. One small read (``Journal.is_newest``): what an agent
        kept in memory between uses (as ``orchestra serve`` keeps them) checks before each use, so that a
        deleted conversation never reaches its model again."""
        return await self._binding(agent).journal.is_newest()

    def stored_bytes(self, agent: Agent) -> int:
        """About how many bytes the agent's stored session holds (its snapshot and the records since):
        what ``orchestra serve`` weighs a cached agent by."""
        return self._binding(agent).journal.stored_bytes

    async def delete_session(self) -> int:
        """Delete this session (all agents and orchestrators in it); returns how many keys held it. A writer
        elsewhere that still holds it sees the delete before it writes again (``admin.delete_session``)."""
        return await erase_session(self.storage, self._session_id)

    async def export(self, agent_id: str = "default", kind: ScopeKind = "agent") -> bytes:
        """One scope of this session as a single self-contained snapshot file (JSON bytes)."""
        return await export_scope(self.storage, self._session_id, kind, agent_id)


async def export_scope(storage: Storage, session_id: str, kind: ScopeKind, scope_id: str) -> bytes:
    """A scope as one self-contained snapshot (messages inline, no journal), as JSON bytes."""
    journal = Journal(storage, ScopeLayout(session_id, kind, scope_id))
    doc = await journal.load()
    if doc is None:
        raise SessionError(f"session {session_id!r} has no {kind} {scope_id!r}")
    return journal.export(doc)
