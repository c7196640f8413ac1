"""Run records: what each invocation did, kept in the workspace's storage for the API and the dashboard."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestra._concurrency import map_concurrently
from orchestra._json import dumps
from orchestra._logging import get_logger
from orchestra.storage import Storage, delete_many, read_many, write_many

__all__ = ["FINAL", "RunRecord", "RunStore", "RunSummary"]

Mode = Literal["session", "stateless", "none"]

log = get_logger("orchestra.server")

_INDEXED = 4096  # run ids remembered as indexed (a session turn's, between its record's two writes)


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
    server: str | None = Field(default=None, description="The server that ran it (its liveness id).")
    stored: bool | None = Field(
        default=None,
        description="Whether the run's turn is in its session: true, false, or null when not known "
        "(a run that stores nothing, stateless or none mode, says false).",
    )
    http_status: int | None = Field(default=None, description="The HTTP status the run was answered with.")
    error_code: str | None = Field(default=None, description="The error code it was answered with.")
    settled: str | None = Field(
        default=None,
        description="Set when the record was made final from the session (its server stopped first, or had "
        "not written it yet).",
    )
    caller_history: int = Field(
        default=0,
        description="Stateless mode: how many messages the caller sent as history (never stored; "
        "messages holds only what this invocation added).",
    )
    background: bool = Field(default=False, description="Started with POST .../runs (or queued).")
    responses: list[dict[str, Any]] = Field(
        default_factory=list, description="The interrupt answers this run was started with."
    )
    interrupts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The open questions of an interrupted run: id, name, reason, node, tool, tool_use_id.",
    )
    waiting: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The waits among its open questions (docs/waiting.md): interrupt_id, kind (timer or "
        "event), until, or event and deadline.",
    )
    stopped: dict[str, Any] | None = Field(
        default=None,
        description="Set when the run was stopped: by (cancel, interrupt, rollback), run_id (the run that "
        "asked), and a note when it was stopped too late or could not be rolled back.",
    )
    on_busy: str | None = Field(default=None, description="The policy it came with for a busy session.")
    supersedes: str | None = Field(
        default=None, description="The run it asked to stop (interrupt and rollback policies)."
    )
    attempt: int = Field(default=1, description="How many times it was started (a takeover starts it again).")
    needs_resume: bool = Field(
        default=False, description="Set when no server could go on with it: POST /runs/{id}/resume."
    )
    resumed_by: str | None = Field(default=None, description="The run that resumed this one.")
    workflow_id: str | None = Field(
        default=None,
        description="The Temporal workflow that runs it on workers (docs/temporal.md); null: run on a server.",
    )
    resume: bool = Field(
        default=False, description="It finishes what its session left open instead of sending input."
    )
    webhook: str | None = Field(default=None, description="The URL called once when it ends.")
    webhook_delivery: str | None = Field(default=None, description="pending, delivered or failed.")
    metadata: dict[str, str] = Field(
        default_factory=dict, description="Given when it was started (searchable: GET /api/v1/runs)."
    )
    owner: str | None = Field(default=None, description="The user who started it (its caller's subject).")
    memory_subject: str | None = Field(
        default=None,
        description='Whose memory it reads and writes (docs/memory.md, "Hosted"): its caller\'s user, or '
        "none for the workspace's memory. A run taken over, woken or resumed keeps it.",
    )


FINAL = frozenset({"completed", "failed", "interrupted", "answered", "rolled_back"})
"""The statuses of a run that has ended (``queued`` and ``executing`` have not). ``answered``: it stopped
for interrupts, and a later run (``resumed_by``) answered them and went on."""


class RunRecord(RunSummary):
    """One invocation of a hosted agent or pipeline."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="An agent's conversation.")
    nodes: dict[str, dict[str, Any]] = Field(default_factory=dict, description="A pipeline's nodes.")
    edges: list[list[str]] = Field(default_factory=list, description="A pipeline's edges: [src, dst, label].")
    caller_messages: list[dict[str, str]] | None = Field(
        default=None,
        description="Stateless background runs: the caller's history, kept only until the run ends (so "
        "that another server can run it).",
    )

    def summary(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"messages", "nodes", "edges", "caller_messages"})

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def answer(self) -> dict[str, Any]:
        """The 200 answer of a run (what invoke answers, a ``result`` event carries and a webhook sends)."""
        answer = {
            "output": self.output,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "usage": self.usage,
            "status": self.status,
            "resumed": self.resumed,
        }
        if self.interrupts:
            answer["interrupts"] = self.interrupts
        if self.stopped is not None:
            answer["stopped"] = self.stopped
        return answer


class RunStore:
    """Run records under ``runs/<agent_id>/<session_id or ->/<run_id>.json``, plus an index by run id.

    Run ids are UUIDv7, so listing a prefix gives runs oldest first. ``unsynced`` is the same storage
    without fsync (local files), for records whose loss in a power cut loses nothing else: the final record
    of a turn whose "executing" record is already durable, and the records of calls that store nothing.

    Those records are written after the answer (``save_later``, then ``flush``), and group-committed: a
    flush writes every record queued by then in one batch (one worker thread for local files), and the
    flushes asked for meanwhile leave their records to it. Until written, ``get`` and ``list`` read them
    from memory. A record whose index entry ``save`` wrote (a session turn's "executing" record) is
    flushed without it: the entry names the same key, and on local files a file written again without
    fsync costs a push of its data to the disk.
    """

    def __init__(self, storage: Storage, unsynced: Storage | None = None) -> None:
        self.storage = storage
        self._unsynced = unsynced or storage
        self._pending: dict[str, RunRecord] = {}
        self._queued: list[RunRecord] = []
        self._flushing = False
        self._indexed: OrderedDict[str, None] = OrderedDict()  # run ids whose index entry save wrote

    @staticmethod
    def _key(record: RunRecord) -> str:
        return f"runs/{record.agent_id}/{record.session_id or '-'}/{record.run_id}.json"

    def _writes(self, record: RunRecord) -> list[tuple[str, bytes]]:
        key = self._key(record)
        data = dumps(record.model_dump(mode="python"), lenient=True).encode()
        return [(key, data), (f"run-index/{record.run_id}", key.encode())]

    def _flushed(self, record: RunRecord) -> list[tuple[str, bytes]]:
        """What a flush writes for a record: without its index entry when ``save`` wrote it."""
        writes = self._writes(record)
        return writes[:1] if record.run_id in self._indexed else writes

    async def save(self, record: RunRecord) -> None:
        """Write the record durably, now, and its index entry beside it without fsync: a killed process
        loses neither, and a power cut only the index entry (the listing still finds the record). Where
        both views are one storage (a database), both go in one batch: one transaction, one thread hop."""
        writes = self._writes(record)
        if self._unsynced is self.storage:
            await write_many(self.storage, writes)
        else:
            (key, data), (index_key, index) = writes
            targets = [(self.storage, key, data), (self._unsynced, index_key, index)]
            await map_concurrently(lambda t: t[0].write(t[1], t[2]), targets)
        self._indexed[record.run_id] = None
        while len(self._indexed) > _INDEXED:  # forgotten: its entry is written again, which is safe
            self._indexed.popitem(last=False)

    def save_later(self, record: RunRecord) -> None:
        """Queue the record for the next ``flush`` (without fsync); readable at once."""
        self._pending[record.run_id] = record
        self._queued.append(record)

    async def flush(self) -> None:
        """Write every queued record (see the class docstring). While a flush runs, another returns at once:
        the running one loops until the queue is empty, so no request waits on another's batch.

        A failed write is logged, never raised (it runs after the answer): the records stay readable
        from memory and the next flush writes them. Until then, another server reading one finds it
        ``executing`` on a live server."""
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                writes = [w for record in batch for w in self._flushed(record)]
                try:
                    await write_many(self._unsynced, writes)
                except Exception as exc:
                    self._queued[:0] = batch  # not lost: still readable, and the next flush writes them
                    log.warning("run_records_not_written", records=len(batch), error=str(exc))
                    return
                except BaseException:
                    self._queued[:0] = batch
                    raise
                for record in batch:
                    self._indexed.pop(record.run_id, None)
                    if self._pending.get(record.run_id) is record:
                        del self._pending[record.run_id]
        finally:
            self._flushing = False

    async def read_versioned(self, run_id: str) -> tuple[RunRecord, str] | None:
        """A record as stored, with its version (for ``replace``)."""
        found = await self.storage.read(f"run-index/{run_id}")
        if found is None:
            return None
        record = await self.storage.read(found[0].decode())
        return None if record is None else (RunRecord.model_validate_json(record[0]), record[1])

    async def replace(self, record: RunRecord, version: str) -> str:
        """Write the record durably if it still has ``version`` (the run's server changes only this way).

        Raises:
            StorageConflictError: another server changed it first.
        """
        self._pending.pop(record.run_id, None)
        data = dumps(record.model_dump(mode="python"), lenient=True).encode()
        return await self.storage.write(self._key(record), data, expect=version)

    # Background runs that have not ended (or whose webhook is not delivered yet): what sweeps look at.

    async def mark_active(self, run_id: str) -> None:
        await self._unsynced.write(f"active-runs/{run_id}", b"")

    async def unmark_active(self, run_id: str) -> None:
        await self._unsynced.delete(f"active-runs/{run_id}")

    async def active_ids(self) -> list[str]:
        return [key.rsplit("/", 1)[-1] for key in await self.storage.list("active-runs/")]

    async def delete(self, record: RunRecord) -> None:
        self._pending.pop(record.run_id, None)
        self._indexed.pop(record.run_id, None)
        await self.storage.delete(f"run-index/{record.run_id}")
        await self.storage.delete(self._key(record))

    async def forget_session(self, agent_id: str, session_id: str) -> list[str]:
        """Delete the records of a session's runs that ended, and their index entries; returns their run
        ids. A run still executing keeps its record: it writes it again when it ends (its turn then meets
        the deleted session and stores nothing, which its record says)."""
        keys = await self.keys([agent_id], session_id)
        records = await self.read_keys(keys)
        ended = [record for record in records if record is not None and record.final]
        for record in ended:
            self._pending.pop(record.run_id, None)
            self._indexed.pop(record.run_id, None)
        gone = {record.run_id for record in ended}
        self._queued = [record for record in self._queued if record.run_id not in gone]
        await delete_many(self.storage, [key for record in ended for key, _ in self._writes(record)])
        return sorted(gone)

    async def get(self, run_id: str) -> RunRecord | None:
        pending = self._pending.get(run_id)
        if pending is not None:
            return pending
        found = await self.storage.read(f"run-index/{run_id}")
        if found is None:
            return None
        record = await self.storage.read(found[0].decode())
        return None if record is None else RunRecord.model_validate_json(record[0])

    async def later(self, record: RunRecord, limit: int = 50) -> list[RunRecord]:
        """The records of ``record``'s session that started after it, oldest first (at most ``limit``)."""
        prefix = f"runs/{record.agent_id}/{record.session_id or '-'}/"
        keys = await self.storage.list(prefix, start_after=self._key(record), limit=limit)
        pending = {
            self._key(r): r
            for r in list(self._pending.values())
            if (r.agent_id, r.session_id) == (record.agent_id, record.session_id) and r.run_id > record.run_id
        }
        keys = sorted({*keys, *pending}, key=lambda k: k.rsplit("/", 1)[-1])[:limit]
        stored = [k for k in keys if k not in pending]
        found = dict(zip(stored, await read_many(self.storage, stored), strict=True))
        return [
            pending[k] if k in pending else RunRecord.model_validate_json(found[k][0])  # type: ignore[index]
            for k in keys
            if k in pending or found[k] is not None
        ]

    async def keys(self, agent_ids: list[str], session_id: str | None = None) -> list[str]:
        """The record keys of the agents' runs (of one session), those not written yet included: one
        listing per agent. A key ends with the run id: ``run_id_of`` gives it."""
        keys: list[str] = []
        for agent_id in agent_ids:
            keys.extend(
                await self.storage.list(
                    f"runs/{agent_id}/{session_id}/" if session_id else f"runs/{agent_id}/"
                )
            )
        pending = [
            self._key(r)
            for r in list(self._pending.values())
            if r.agent_id in agent_ids and (session_id is None or r.session_id == session_id)
        ]
        return sorted({*keys, *pending})

    @staticmethod
    def run_id_of(key: str) -> str:
        return key.rsplit("/", 1)[-1].removesuffix(".json")

    @staticmethod
    def session_of(key: str) -> str | None:
        """The session of a record key (None for a run without one)."""
        session = key.split("/")[2]
        return None if session == "-" else session

    async def read_keys(self, keys: list[str]) -> list[RunRecord | None]:
        """The records of ``keys`` (from ``keys``), read in one batch; None for one that is gone."""
        pending = {self._key(r): r for r in list(self._pending.values())}
        stored = [k for k in keys if k not in pending]
        found = dict(zip(stored, await read_many(self.storage, stored), strict=True))
        return [
            pending[k]
            if k in pending
            else None
            if found[k] is None
            else RunRecord.model_validate_json(found[k][0])  # type: ignore[index]
            for k in keys
        ]

    async def list(
        self, agent_ids: list[str], session_id: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """The agents' newest ``limit`` records (of one session), newest first."""
        keys = sorted(await self.keys(agent_ids, session_id), key=self.run_id_of, reverse=True)[:limit]
        return [record for record in await self.read_keys(keys) if record is not None]
