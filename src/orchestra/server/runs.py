"""Run records: what each invocation did, kept in the workspace's storage for the API and the dashboard."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestra._concurrency import map_concurrently
from orchestra._json import dumps
from orchestra.storage import Storage

__all__ = ["RunRecord", "RunStore", "RunSummary"]

Mode = Literal["session", "stateless", "none"]


class RunSummary(BaseModel):
    """A run record without its conversation, nodes and edges (what run listings answer)."""

    model_config = ConfigDict(extra="ignore")

    run_id: str
    agent_id: str
    kind: str
    mode: Mode
    session_id: str | None = None
    status: str = "executing"
    started_at: str
    finished_at: str | None = None
    duration_ms: float | None = None
    input: Any = None
    output: Any = None
    error: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    resumed: bool = False
    caller_history: int = Field(
        default=0,
        description="Stateless mode: how many messages the caller sent as history (never stored; "
        "messages holds only what this invocation added).",
    )


class RunRecord(RunSummary):
    """One invocation of a hosted agent or pipeline."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="An agent's conversation.")
    nodes: dict[str, dict[str, Any]] = Field(default_factory=dict, description="A pipeline's nodes.")
    edges: list[list[str]] = Field(default_factory=list, description="A pipeline's edges: [src, dst, label].")

    def summary(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"messages", "nodes", "edges"})


class RunStore:
    """Run records under ``runs/<agent_id>/<session_id or ->/<run_id>.json``, plus an index by run id.

    Run ids are UUIDv7, so listing a prefix gives runs oldest first. ``unsynced`` is the same storage
    without fsync (local files), for records whose loss in a power cut loses nothing else: the final record
    of a turn whose "executing" record is already durable, and the records of calls that store nothing.
    """

    def __init__(self, storage: Storage, unsynced: Storage | None = None) -> None:
        self.storage = storage
        self._unsynced = unsynced or storage

    @staticmethod
    def _key(record: RunRecord) -> str:
        return f"runs/{record.agent_id}/{record.session_id or '-'}/{record.run_id}.json"

    async def save(self, record: RunRecord, *, durable: bool = True) -> None:
        """Write the record and its index entry (at once: their writes overlap)."""
        storage = self.storage if durable else self._unsynced
        key = self._key(record)
        data = dumps(record.model_dump(mode="python"), lenient=True).encode()
        writes = [(key, data), (f"run-index/{record.run_id}", key.encode())]
        await map_concurrently(lambda item: storage.write(*item), writes)

    async def delete(self, record: RunRecord) -> None:
        await self.storage.delete(f"run-index/{record.run_id}")
        await self.storage.delete(self._key(record))

    async def get(self, run_id: str) -> RunRecord | None:
        found = await self.storage.read(f"run-index/{run_id}")
        if found is None:
            return None
        record = await self.storage.read(found[0].decode())
        return None if record is None else RunRecord.model_validate_json(record[0])

    async def list(
        self, agent_ids: list[str], session_id: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        keys: list[str] = []
        for agent_id in agent_ids:
            prefix = f"runs/{agent_id}/{session_id}/" if session_id else f"runs/{agent_id}/"
            keys.extend(await self.storage.list(prefix))
        keys.sort(key=lambda k: k.rsplit("/", 1)[-1], reverse=True)

        async def read(key: str) -> RunRecord | None:
            found = await self.storage.read(key)
            return None if found is None else RunRecord.model_validate_json(found[0])

        records = await map_concurrently(read, keys[:limit])
        return [r for r in records if r is not None]
