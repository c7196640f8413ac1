"""Where hosting keeps what it stores, per workspace: sessions, run records, busy documents, keys.

Every key of a workspace is under ``ws/<workspace>/`` of the server's storage (``root``): its agents'
sessions under ``agents/<agent_id>/``, run records under ``runs/``, busy documents under ``busy/``,
idempotency keys under ``idempotency/``, memory items under ``memory/``, event logs under ``events/``, stop requests under ``signals/``.
``unsynced`` is the same storage written without fsync on local files: what a killed process keeps, and
what a power cut may lose at no cost (an index entry, a heartbeat, an event already sent, a busy
document whose runs a sweep queues again).
"""

from __future__ import annotations

from orchestra.hosting.config import ServerConfig
from orchestra.hosting.idempotency import IdempotencyKeys
from orchestra.hosting.liveness import Liveness
from orchestra.hosting.memory import WorkspaceMemory
from orchestra.hosting.records import RunStore
from orchestra.hosting.session_queue import SessionQueues
from orchestra.storage import LocalFileStorage, PrefixedStorage, Storage, storage_from_uri

__all__ = ["Workspaces"]


class Workspaces:
    """The storage views of every workspace, the stores kept per workspace (see the module docstring), and
    this server's heartbeat on the storage (``liveness``).

    ``root`` may be replaced (a test wraps it to inject faults): the views made after that use the new one.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.root: Storage = storage_from_uri(config.storage)
        self.unsynced_root: Storage = (
            LocalFileStorage(self.root.root, durable=False)
            if isinstance(self.root, LocalFileStorage)
            else self.root
        )
        self.liveness = Liveness(
            self.unsynced_root, every_s=config.runs.heartbeat_s, gone_after_s=config.runs.server_gone_after_s
        )
        self._views: dict[str, tuple[Storage, Storage]] = {}
        self._runs: dict[str, RunStore] = {}
        self._queues: dict[str, SessionQueues] = {}
        self._keys: dict[str, IdempotencyKeys] = {}
        self.memory = WorkspaceMemory(self.storage, config.memory)
        """Each workspace's memory store, under ``memory/``, and the namespace each caller is bound to."""

    def storage(self, workspace: str) -> Storage:
        """The part of the storage that belongs to one workspace."""
        cached = self._views.get(workspace)
        if cached is None or cached[0] is not self.root:  # (tests put a wrapper in place of root)
            cached = self._views[workspace] = (self.root, PrefixedStorage(self.root, f"ws/{workspace}"))
        return cached[1]

    def unsynced(self, workspace: str) -> Storage:
        """The workspace's storage, written without fsync on local files."""
        return PrefixedStorage(self.unsynced_root, f"ws/{workspace}")

    def agent_storage(self, workspace: str, agent_id: str) -> Storage:
        """Where one hosted agent's sessions live: sessions are per agent, so one session id used with
        two agents gives two separate histories."""
        return PrefixedStorage(self.storage(workspace), f"agents/{agent_id}")

    def runs(self, workspace: str) -> RunStore:
        """The workspace's run records (one store per workspace: it holds the records not yet written)."""
        store = self._runs.get(workspace)
        if store is None:
            # On a database both views are one storage: the store then writes a record and its index
            # entry in one batch.
            unsynced = self.unsynced(workspace) if self.unsynced_root is not self.root else None
            store = self._runs[workspace] = RunStore(self.storage(workspace), unsynced)
        return store

    def queues(self, workspace: str) -> SessionQueues:
        """Which run each of the workspace's sessions runs, and which wait (``session_queue.py``)."""
        queues = self._queues.get(workspace)
        if queues is None:
            queues = self._queues[workspace] = SessionQueues(
                self.unsynced(workspace), self.liveness, self.config.runs.max_queue
            )
        return queues

    def keys(self, workspace: str) -> IdempotencyKeys:
        """The workspace's idempotency keys."""
        keys = self._keys.get(workspace)
        if keys is None or keys.storage is not self.storage(workspace):
            keys = self._keys[workspace] = IdempotencyKeys(
                self.storage(workspace), self.config.runs.idempotency_ttl_s
            )
        return keys

    def all(self) -> list[str]:
        """The workspaces of the hosted agents."""
        return sorted({hosted.workspace for hosted in self.config.agents})
