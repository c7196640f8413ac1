"""Reading run records as they stand: a record its server left ``executing`` is settled from the session.

A record says ``executing`` while its run runs, and its server writes it final after the answer. Read
by anyone, a record is taken as it is unless:

- it runs on this server (it is final once its run ends here: ``wait_final`` waits for that);
- its server is alive elsewhere: if its session says the run ended (its commit point is there), it is
  answered final at once (``session_outcome.ended_in_session``), not written: its server writes its own;
- its server is gone, or this server stopped before writing it: it is settled from the session and
  written (``session_outcome.settle_from_session``);
- it failed with an outcome the storage could not tell: settled the same way.

A run that waits for answers to its interrupts is closed ``answered`` when a later run of its session
answered them (``interrupts.close_if_answered``). Background runs are not settled here: a sweep takes
over those of a gone server (``takeover.py``).
"""

from __future__ import annotations

import functools

import anyio

from orchestra._concurrency import map_concurrently
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.idempotency import KeyRefused
from orchestra.hosting.interrupts import close_if_answered
from orchestra.hosting.records import RunRecord
from orchestra.hosting.running import Running
from orchestra.hosting.session_outcome import ended_in_session, settle_from_session
from orchestra.hosting.workspaces import Workspaces

__all__ = ["RunReader"]

# Why a record still executing on another live server is read from its session (its final record may
# not be written yet: the turn is answered first).
_ELSEWHERE = "its server had not written its final record yet"


class RunReader:
    """Run records read settled (see the module docstring)."""

    def __init__(self, config: ServerConfig, workspaces: Workspaces, running: Running) -> None:
        self.config = config
        self.workspaces = workspaces
        self.running = running
        self.liveness = workspaces.liveness

    async def run_record(self, workspace: str, run_id: str) -> RunRecord | None:
        """A run's record, settled from its session if its server stopped before it was final."""
        record = await self.workspaces.runs(workspace).get(run_id)
        return None if record is None else await self._settled(workspace, record)

    async def list_runs(
        self, workspace: str, agent_ids: list[str], session_id: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Run records, newest first (``RunStore.list``), each settled like ``run_record``."""
        records = await self.workspaces.runs(workspace).list(agent_ids, session_id, limit)
        return await map_concurrently(functools.partial(self._settled, workspace), records)

    async def settled(self, workspace: str, records: list[RunRecord | None]) -> list[RunRecord | None]:
        """Records (None kept as None), each settled like ``run_record``."""

        async def one(record: RunRecord | None) -> RunRecord | None:
            return None if record is None else await self._settled(workspace, record)

        return await map_concurrently(one, records)

    async def _settled(self, workspace: str, record: RunRecord) -> RunRecord:
        why = await self._why_unsettled(record)
        runs = self.workspaces.runs(workspace)
        if why is None:
            return await close_if_answered(runs, record)
        storage = self.workspaces.agent_storage(workspace, record.agent_id)
        if why is _ELSEWHERE:
            # Its server answers a turn after its commit point and writes the final record after the
            # answer: read from the session, a run that ended is final at once. Not written here: its
            # server writes its own (or, if it stopped, a read after it counts as gone does).
            return await ended_in_session(self.config, storage, record, why) or record
        settled = await settle_from_session(self.config, storage, record, why)
        await runs.save(settled)
        return settled

    async def _why_unsettled(self, record: RunRecord) -> str | None:
        if record.settled is not None or record.agent_id not in self.config.loaded or record.background:
            return None  # a background run of a server that is gone is taken over by a sweep instead
        if record.status == "executing":
            if self.running.here(record.run_id):
                return None
            if record.server == self.liveness.server_id:
                return "this server did not finish its record"
            if await self.liveness.is_alive(record.server):
                return _ELSEWHERE
            return "its server stopped before the run was recorded as finished"
        if record.stored is None and record.status == "failed" and record.mode == "session":
            return "the storage could not tell whether its turn was stored"
        return None

    async def wait_final(self, workspace: str, run_id: str) -> RunRecord:
        """``run_id``'s record once it has ended, wherever it runs (woken here, else read every poll)."""
        while True:
            running = self.running.runs.get(run_id)
            if running is not None:
                await running.wait()
            record = await self.run_record(workspace, run_id)
            if record is None:
                raise KeyRefused(404, "unknown_run", f"run {run_id} is gone (its session was deleted?)")
            if record.final:
                return record
            with anyio.move_on_after(self.config.runs.poll_s):
                await self.running.changed(run_id).wait()
