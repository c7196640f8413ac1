"""The repository-based session managers: the seed's per-message layout, kept for compatibility.

``RepositorySessionManager`` stores a session through a ``SessionRepository`` (create/read session;
create/read/update agent; create/read/update/list messages; create/read/update multi-agent).
``FileSessionManager`` and ``S3SessionManager`` use ``StorageSessionRepository`` over local files or S3,
with the seed's layout::

    session_<id>/session.json
    session_<id>/agents/agent_<agent_id>/agent.json
    session_<id>/agents/agent_<agent_id>/messages/message_<n>.json
    session_<id>/multi_agents/multi_agent_<orchestrator_id>/multi_agent.json

The files are Strands Agents' own format (``_strands_files``): either framework reads and continues the
other's sessions. Every write is conditional: messages are created only if absent, and ``agent.json``,
``multi_agent.json`` and redacted messages are replaced only if unchanged since this manager last read or
wrote them, so a second writer gets ``SessionConflictError`` instead of silently winning. A corrupt,
foreign or missing file raises ``SnapshotError`` naming it.

New code should prefer ``SnapshotSessionManager``: it saves only what changed.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import weakref
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from orchestra._concurrency import map_concurrently
from orchestra._ids import validate_id
from orchestra._json import decode_bytes
from orchestra.agent import AgentData, AgentLike
from orchestra.errors import SessionConflictError, SessionError, SnapshotError, StorageConflictError
from orchestra.hooks import (
    AfterInvocation,
    AgentInitialized,
    HookRegistry,
    MessageAdded,
    MessageRedacted,
    TurnCheckpoint,
)
from orchestra.messages import Message, MessageDict, validate_message
from orchestra.multiagent.events import AfterMultiAgentInvocation, AfterNodeCall, BeforeMultiAgentInvocation
from orchestra.session._strands_files import file_json, message_from_file, message_to_file
from orchestra.session.snapshot import now_iso
from orchestra.storage import ABSENT, Expect, LocalFileStorage, Storage

__all__ = [
    "FileSessionManager",
    "RepositorySessionManager",
    "S3SessionManager",
    "Session",
    "SessionAgent",
    "SessionMessage",
    "SessionRepository",
    "StorageSessionRepository",
]

_R = TypeVar("_R", bound=BaseModel)


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Session(_Record):
    """A session: the namespace of its agents and orchestrators."""

    session_id: str
    session_type: str = "AGENT"
    created_at: str = Field(default_factory=now_iso)
    updated_at: str = Field(default_factory=now_iso)


class SessionAgent(_Record):
    """One agent of a session: its state and its conversation manager's state."""

    agent_id: str
    state: dict[str, Any] = Field(default_factory=dict)
    conversation_manager_state: dict[str, Any] = Field(default_factory=dict)
    system_prompt: str | None = None
    interrupt_state: dict[str, Any] | None = None
    # Strands Agents' own internal state (its interrupt and model state): kept as found, never interpreted.
    internal_state: dict[str, Any] = Field(default_factory=dict, alias="_internal_state")
    created_at: str = Field(default_factory=now_iso)
    updated_at: str = Field(default_factory=now_iso)


class SessionMessage(_Record):
    """One message of an agent's conversation, with its redacted version if it was redacted."""

    message: Message
    message_id: int
    redact_message: Message | None = None
    created_at: str = Field(default_factory=now_iso)
    updated_at: str = Field(default_factory=now_iso)

    def to_message(self) -> MessageDict:
        """The message to show the model: the redacted version when there is one."""
        chosen = self.redact_message or self.message
        return chosen.model_dump(by_alias=True, exclude_none=True)

    def to_file(self) -> dict[str, Any]:
        """This message as a file of the repository layout (the format Strands Agents reads)."""

        def plain(message: Message | None) -> dict[str, Any] | None:
            return (
                None
                if message is None
                else message_to_file(message.model_dump(by_alias=True, exclude_none=True))
            )

        return {
            "message": plain(self.message),
            "message_id": self.message_id,
            "redact_message": plain(self.redact_message),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_file(cls, raw: Any, where: str) -> SessionMessage:
        """Read a message file written by orchestra or by Strands Agents.

        Raises:
            SnapshotError: the file is not a message file, or holds a message orchestra cannot load.
        """
        if not isinstance(raw, dict) or "message" not in raw or not isinstance(raw.get("message_id"), int):
            raise SnapshotError(
                f"{where}: not a message file (expected 'message' and an integer 'message_id')"
            )
        redacted = raw.get("redact_message")
        return cls(
            message=Message.model_validate(message_from_file(raw["message"], f"{where}: message")),
            message_id=raw["message_id"],
            redact_message=None
            if redacted is None
            else Message.model_validate(message_from_file(redacted, f"{where}: redact_message")),
            created_at=str(raw.get("created_at") or now_iso()),
            updated_at=str(raw.get("updated_at") or now_iso()),
        )


@runtime_checkable
class SessionRepository(Protocol):
    """Where a repository-based session lives. Methods may be sync or async."""

    def create_session(self, session: Session) -> Any: ...
    def read_session(self, session_id: str) -> Any: ...
    def create_agent(self, session_id: str, session_agent: SessionAgent) -> Any: ...
    def read_agent(self, session_id: str, agent_id: str) -> Any: ...
    def update_agent(self, session_id: str, session_agent: SessionAgent) -> Any: ...
    def create_message(self, session_id: str, agent_id: str, session_message: SessionMessage) -> Any: ...
    def read_message(self, session_id: str, agent_id: str, message_id: int) -> Any: ...
    def update_message(self, session_id: str, agent_id: str, session_message: SessionMessage) -> Any: ...
    def list_messages(
        self, session_id: str, agent_id: str, limit: int | None = None, offset: int = 0
    ) -> Any: ...
    def create_multi_agent(self, session_id: str, multi_agent_state: dict[str, Any]) -> Any: ...
    def read_multi_agent(self, session_id: str, multi_agent_id: str) -> Any: ...
    def update_multi_agent(self, session_id: str, multi_agent_state: dict[str, Any]) -> Any: ...


async def _call(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


class StorageSessionRepository:
    """A ``SessionRepository`` over any ``Storage``, in the seed's layout. Reads messages concurrently.

    It remembers the version of every file it read or wrote, and replaces a file only if it still has that
    version: a second writer of the same agent or orchestrator gets ``SessionConflictError``.
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._versions: dict[str, str] = {}

    @staticmethod
    def _session(session_id: str) -> str:
        return f"session_{validate_id(session_id, 'session_id')}/"

    def _agent(self, session_id: str, agent_id: str) -> str:
        return f"{self._session(session_id)}agents/agent_{validate_id(agent_id, 'agent_id')}/"

    def _message(self, session_id: str, agent_id: str, message_id: int) -> str:
        return f"{self._agent(session_id, agent_id)}messages/message_{int(message_id)}.json"

    def _multi_agent(self, session_id: str, multi_agent_id: str) -> str:
        oid = validate_id(multi_agent_id, "orchestrator id")
        return f"{self._session(session_id)}multi_agents/multi_agent_{oid}/multi_agent.json"

    async def _read_json(self, key: str) -> Any:
        found = await self.storage.read(key)
        if found is None:
            self._versions.pop(key, None)
            return None
        data, version = found
        self._remember(key, version)
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SnapshotError(
                f"{key}: not valid JSON ({exc}); the file is corrupt or truncated. Nothing was overwritten: "
                "restore it from a backup, or delete the session to start over"
            ) from None

    async def _read(self, key: str, cls: type[_R]) -> _R | None:
        raw = await self._read_json(key)
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise SnapshotError(f"{key}: expected a JSON object, found {type(raw).__name__}")
        try:
            return cls.model_validate(decode_bytes(raw))
        except ValueError as exc:
            raise SnapshotError(
                f"{key}: not a valid {cls.__name__} file ({exc}); nothing was overwritten"
            ) from None

    def _remember(self, key: str, version: str) -> None:
        # Message files are created once and replaced only by a redaction, which reads its version just
        # before: remembering every message's would cost memory per message for nothing.
        if "/messages/message_" not in key:
            self._versions[key] = version

    async def _write(self, key: str, value: Any, *, create: bool) -> None:
        """Create ``key`` (only if absent) or replace it (only if unchanged since this repository saw it)."""
        expect: Expect = ABSENT
        if not create:
            version = self._versions.get(key)
            if version is None:  # a message, or a file this writer never saw: take its version now
                found = await self.storage.read(key)
                version = found[1] if found is not None else None
            expect = ABSENT if version is None else version
        try:
            self._remember(key, await self.storage.write(key, file_json(value), expect=expect))
        except StorageConflictError as exc:
            what = "already exists" if create else "was changed since this writer read it"
            raise SessionConflictError(
                f"{key} {what}: another writer of this session and agent or orchestrator (two live "
                "writers); nothing was overwritten. Reload to continue from the stored state."
            ) from exc

    async def create_session(self, session: Session) -> Session:
        await self._write(
            f"{self._session(session.session_id)}session.json", session.model_dump(), create=True
        )
        return session

    async def read_session(self, session_id: str) -> Session | None:
        return await self._read(f"{self._session(session_id)}session.json", Session)

    async def create_agent(self, session_id: str, session_agent: SessionAgent) -> None:
        folder = self._agent(session_id, session_agent.agent_id)
        await self._write(f"{folder}agent.json", session_agent.model_dump(by_alias=True), create=True)
        if isinstance(self.storage, LocalFileStorage):
            # Strands Agents lists a conversation by listing this folder: it must exist, even while empty.
            (self.storage.root / folder / "messages").mkdir(mode=0o700, parents=True, exist_ok=True)

    async def read_agent(self, session_id: str, agent_id: str) -> SessionAgent | None:
        return await self._read(f"{self._agent(session_id, agent_id)}agent.json", SessionAgent)

    async def update_agent(self, session_id: str, session_agent: SessionAgent) -> None:
        session_agent.updated_at = now_iso()
        key = f"{self._agent(session_id, session_agent.agent_id)}agent.json"
        await self._write(key, session_agent.model_dump(by_alias=True), create=False)

    async def create_message(self, session_id: str, agent_id: str, session_message: SessionMessage) -> None:
        key = self._message(session_id, agent_id, session_message.message_id)
        await self._write(key, session_message.to_file(), create=True)

    async def _read_message_file(self, key: str) -> SessionMessage | None:
        raw = await self._read_json(key)
        return None if raw is None else SessionMessage.from_file(raw, key)

    async def read_message(self, session_id: str, agent_id: str, message_id: int) -> SessionMessage | None:
        return await self._read_message_file(self._message(session_id, agent_id, message_id))

    async def update_message(self, session_id: str, agent_id: str, session_message: SessionMessage) -> None:
        session_message.updated_at = now_iso()
        key = self._message(session_id, agent_id, session_message.message_id)
        await self._write(key, session_message.to_file(), create=False)

    async def list_messages(
        self, session_id: str, agent_id: str, limit: int | None = None, offset: int = 0
    ) -> list[SessionMessage]:
        """The messages in order. A gap in their numbers (a deleted or lost file) raises ``SnapshotError``."""
        prefix = f"{self._agent(session_id, agent_id)}messages/message_"
        numbered: list[tuple[int, str]] = []
        for key in await self.storage.list(prefix):
            digits = key[len(prefix) :].removesuffix(".json")
            if key.endswith(".json") and digits.isdigit():
                numbered.append((int(digits), key))
        numbered.sort()
        for expected, (found_number, _) in enumerate(numbered):
            if found_number != expected:
                raise SnapshotError(
                    f"{prefix}{expected}.json is missing (found message_{found_number}.json after it): the "
                    "conversation has a hole, so it is not loaded. Restore the file from a backup, or delete "
                    "the messages after the hole to continue from there"
                )
        keys = [key for _, key in numbered]
        keys = keys[offset:] if limit is None else keys[offset : offset + limit]
        found = await map_concurrently(self._read_message_file, keys)
        return [m for m in found if m is not None]

    async def create_multi_agent(self, session_id: str, multi_agent_state: dict[str, Any]) -> None:
        key = self._multi_agent(session_id, str(multi_agent_state["id"]))
        await self._write(key, multi_agent_state, create=True)

    async def read_multi_agent(self, session_id: str, multi_agent_id: str) -> dict[str, Any] | None:
        key = self._multi_agent(session_id, multi_agent_id)
        raw = await self._read_json(key)
        if raw is not None and not isinstance(raw, dict):
            raise SnapshotError(f"{key}: expected a JSON object, found {type(raw).__name__}")
        return None if raw is None else dict(decode_bytes(raw))

    async def update_multi_agent(self, session_id: str, multi_agent_state: dict[str, Any]) -> None:
        key = self._multi_agent(session_id, str(multi_agent_state["id"]))
        await self._write(key, multi_agent_state, create=False)


async def stored_agent_data(
    repo: SessionRepository, session_id: str, stored: SessionAgent
) -> tuple[AgentData, int]:
    """What an agent of the repository layout loads as: the messages its conversation manager kept (after
    the ``removed_message_count`` first, behind its summary if it has one), and how many are stored."""
    offset = int(stored.conversation_manager_state.get("removed_message_count", 0))
    stored_messages: list[SessionMessage] = await _call(
        repo.list_messages(session_id, stored.agent_id, None, 0)
    )
    messages = [m.to_message() for m in stored_messages[offset:]]
    summary = stored.conversation_manager_state.get("summary_message")
    if summary:
        messages.insert(0, validate_message(summary))
    data = AgentData(
        messages=messages,
        state=stored.state,
        conversation_manager_state=stored.conversation_manager_state,
        system_prompt=stored.system_prompt,
        interrupt_state=stored.interrupt_state,
    )
    return data, len(stored_messages)


class _Tracked:
    def __init__(self, next_message_id: int, stored: SessionAgent) -> None:
        self.next_message_id = next_message_id
        self.created_at = stored.created_at  # agent.json's, kept by every update
        self.internal_state = stored.internal_state  # Strands' own, written back as found


class RepositorySessionManager:
    """Persists an agent message by message through a ``SessionRepository``.

    Args:
        session_id: the session (letters, digits, ``._-``, 1-128 characters).
        session_repository: where the session lives.
    """

    def __init__(self, session_id: str, session_repository: SessionRepository) -> None:
        self._session_id = validate_id(session_id, "session_id")
        self.session_repository = session_repository
        self._agents: weakref.WeakKeyDictionary[AgentLike, _Tracked] = weakref.WeakKeyDictionary()
        self._orchestrators: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

    @property
    def session_id(self) -> str:
        return self._session_id

    def register_hooks(self, registry: HookRegistry) -> None:
        registry.add_callback(AgentInitialized, self._on_initialized)
        registry.add_callback(MessageAdded, self._on_message_added)
        registry.add_callback(MessageRedacted, self._on_message_redacted)
        registry.add_callback(AfterInvocation, self._on_after_invocation)
        registry.add_callback(TurnCheckpoint, self._on_turn_checkpoint)

    def register_multi_agent_hooks(self, registry: HookRegistry) -> None:
        """Persist a Graph or Swarm as one ``multi_agent.json`` (rewritten whole after every node)."""
        registry.add_callback(BeforeMultiAgentInvocation, self._restore_orchestrator)
        registry.add_callback(AfterNodeCall, lambda event: self._save_orchestrator(event.orchestrator))
        registry.add_callback(
            AfterMultiAgentInvocation, lambda event: self._save_orchestrator(event.orchestrator)
        )

    async def _restore_orchestrator(self, event: Any) -> None:
        orchestrator = event.orchestrator
        if orchestrator in self._orchestrators:
            return
        await self._ensure_session()
        payload = await _call(
            self.session_repository.read_multi_agent(self._session_id, orchestrator.scope_id)
        )
        if payload is not None and "run" not in payload and payload.get("type") in ("graph", "swarm"):
            key = f"session_{self._session_id}/multi_agents/multi_agent_{orchestrator.scope_id}/multi_agent.json"
            raise SnapshotError(
                f"{key} holds a run of a Strands Agents {payload['type']}, which orchestra cannot resume "
                "(its nodes and edges are Strands objects). Nothing was run or overwritten: finish that run "
                "with Strands, or give this orchestrator another id or session"
            )
        self._orchestrators[orchestrator] = payload is not None
        if payload is not None:
            orchestrator.document.load_json(
                {k: v for k, v in payload.items() if k not in ("id", "updated_at")}
            )

    async def _save_orchestrator(self, orchestrator: Any) -> None:
        orchestrator.document.take_changes()  # this layout rewrites the whole state: nothing to track
        payload = {"id": orchestrator.scope_id, "updated_at": now_iso(), **orchestrator.document.dump()}
        repo = self.session_repository
        if self._orchestrators.get(orchestrator):
            await _call(repo.update_multi_agent(self._session_id, payload))
        else:
            await _call(repo.create_multi_agent(self._session_id, payload))
            self._orchestrators[orchestrator] = True

    async def _ensure_session(self) -> None:
        repo = self.session_repository
        if await _call(repo.read_session(self._session_id)) is None:
            # Created meanwhile by another agent of this session: that is fine.
            with contextlib.suppress(SessionConflictError):
                await _call(repo.create_session(Session(session_id=self._session_id)))

    async def _on_initialized(self, event: AgentInitialized) -> None:
        agent = event.agent
        agent.bind_session(f"{self._session_id}/agent/{agent.agent_id}")  # the keys of its tool calls
        repo = self.session_repository
        await self._ensure_session()
        stored: SessionAgent | None = await _call(repo.read_agent(self._session_id, agent.agent_id))
        if stored is None:
            data = agent.agent_data()
            created = SessionAgent(
                agent_id=agent.agent_id,
                state=data.state,
                conversation_manager_state=data.conversation_manager_state,
                system_prompt=data.system_prompt,
            )
            await _call(repo.create_agent(self._session_id, created))
            self._agents[agent] = _Tracked(0, created)
            for message in list(agent.messages):
                await self._create_message(agent, message)
            return
        data, count = await stored_agent_data(repo, self._session_id, stored)
        if data.system_prompt is None:
            data.system_prompt = agent.system_prompt
        agent.load_agent_data(data)
        self._agents[agent] = _Tracked(count, stored)

    def _tracked(self, agent: AgentLike) -> _Tracked:
        tracked = self._agents.get(agent)
        if tracked is None:
            raise SessionError(f"agent {agent.name!r} is not attached to session {self._session_id!r}")
        return tracked

    async def _create_message(self, agent: AgentLike, message: MessageDict) -> None:
        tracked = self._tracked(agent)
        session_message = SessionMessage(
            message=Message.model_validate(message), message_id=tracked.next_message_id
        )
        await _call(self.session_repository.create_message(self._session_id, agent.agent_id, session_message))
        tracked.next_message_id += 1

    async def _on_message_added(self, event: MessageAdded) -> None:
        await self._create_message(event.agent, event.message)

    async def _on_message_redacted(self, event: MessageRedacted) -> None:
        agent = event.agent
        message_id = self._tracked(agent).next_message_id - 1
        repo = self.session_repository
        stored: SessionMessage | None = await _call(
            repo.read_message(self._session_id, agent.agent_id, message_id)
        )
        if stored is None:
            raise SessionError(f"session {self._session_id!r}: message {message_id} to redact is not stored")
        # Both copies become the redaction: Strands keeps the original beside it, but a redacted secret
        # must not stay in storage. Strands reads the file the same way (it shows ``redact_message``).
        stored.message = stored.redact_message = Message.model_validate(event.message)
        await _call(repo.update_message(self._session_id, agent.agent_id, stored))

    async def _on_turn_checkpoint(self, event: TurnCheckpoint) -> None:
        # A side-effecting tool's ledger (interrupt_state) must be durable before it runs; the messages
        # up to the model's tool calls already are (this layout saves each message as it is added).
        await self._save_agent(event.agent)

    async def _on_after_invocation(self, event: AfterInvocation) -> None:
        await self._save_agent(event.agent)

    async def _save_agent(self, agent: AgentLike) -> None:
        tracked = self._tracked(agent)
        data = agent.agent_data()
        await _call(
            self.session_repository.update_agent(
                self._session_id,
                SessionAgent(
                    agent_id=agent.agent_id,
                    state=data.state,
                    conversation_manager_state=data.conversation_manager_state,
                    system_prompt=data.system_prompt,
                    interrupt_state=data.interrupt_state,
                    internal_state=tracked.internal_state,
                    created_at=tracked.created_at,
                ),
            )
        )


class FileSessionManager(RepositorySessionManager):
    """A repository-based session in local files under ``storage_dir`` (default ``./.orchestra/``)."""

    def __init__(self, session_id: str, storage_dir: str | None = None) -> None:
        self.storage_dir = storage_dir or "./.orchestra/"
        super().__init__(session_id, StorageSessionRepository(LocalFileStorage(self.storage_dir)))


class S3SessionManager(RepositorySessionManager):
    """A repository-based session in an S3 bucket under ``prefix``."""

    def __init__(
        self,
        session_id: str,
        bucket: str,
        prefix: str = "",
        *,
        region_name: str | None = None,
        boto_session: Any = None,
        client: Any = None,
        endpoint_url: str | None = None,
    ) -> None:
        from orchestra.storage.s3 import S3Storage

        storage = S3Storage(
            bucket,
            prefix=prefix,
            region_name=region_name,
            boto_session=boto_session,
            client=client,
            endpoint_url=endpoint_url,
        )
        super().__init__(session_id, StorageSessionRepository(storage))
