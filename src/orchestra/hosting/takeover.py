"""Sweeps: every ``runs.sweep_s`` each server looks after the workspaces' unfinished background runs
(``active-runs/``), so that no run stays ``executing`` or queued forever when its server is gone.

- a run whose server is gone (``liveness.py``) is taken over: ``BackgroundRuns.drive`` starts it again
  here (attempt + 1); a run of a live server, this one included, is never taken over;
- a run started ``runs.max_attempts`` times, or whose agent is no longer hosted, is ended ``interrupted``
  with ``needs_resume``;
- a queued run whose session's running run died with its server gets the session
  (``SessionQueues.recover``);
- an ended run whose webhook its server did not deliver gets it delivered;
- a stop request that reached a run after it ended (or that named no run) is deleted, and a release
  whose storage failed is tried again.
"""

from __future__ import annotations

import anyio

from orchestra._logging import get_logger
from orchestra.errors import OrchestraError
from orchestra.hosting.background import BackgroundRuns
from orchestra.hosting.running import Running
from orchestra.hosting.stops import Stops
from orchestra.hosting.workspaces import Workspaces

__all__ = ["Sweeps"]

log = get_logger("orchestra.server")


class Sweeps:
    """The sweeps of this server (see the module docstring)."""

    def __init__(
        self, workspaces: Workspaces, running: Running, stops: Stops, background: BackgroundRuns
    ) -> None:
        self.workspaces = workspaces
        self.config = workspaces.config
        self.liveness = workspaces.liveness
        self.running = running
        self.stops = stops
        self.background = background

    async def sweep_forever(self) -> None:
        """Sweep every workspace every ``runs.sweep_s`` (a storage failure is logged; the next one tries)."""
        while True:
            await anyio.sleep(self.config.runs.sweep_s)
            for workspace in self.workspaces.all():
                try:
                    await self.sweep(workspace)
                except (OrchestraError, OSError) as exc:
                    log.warning("sweep_failed", workspace=workspace, error=f"{type(exc).__name__}: {exc}")

    async def _clear_late_stops(self, workspace: str) -> None:
        """Stop requests that reached a run after it ended (or that named no run) are deleted."""
        storage = self.workspaces.storage(workspace)
        for key in await storage.list("signals/"):
            run_id = key.rsplit("/", 1)[-1].removesuffix(".json")
            if self.running.here(run_id):
                continue
            record = await self.workspaces.runs(workspace).get(run_id)
            if record is None or record.final:
                await self.stops.clear(storage, run_id)

    async def sweep(self, workspace: str) -> None:
        """Look after the workspace's unfinished background runs once (see the module docstring)."""
        runs, liveness, background = self.workspaces.runs(workspace), self.liveness, self.background
        await background.retry_releases()
        await self._clear_late_stops(workspace)
        for run_id in await runs.active_ids():
            if self.running.here(run_id):
                continue
            found = await runs.read_versioned(run_id)
            if found is None:
                await runs.unmark_active(run_id)
                continue
            record, version = found
            if record.final:
                if record.webhook_delivery != "pending":
                    await runs.unmark_active(run_id)
                elif not await liveness.is_alive(record.server):
                    background.launch(workspace, run_id)  # delivers the webhook its server did not
                continue
            alive = await liveness.is_alive(record.server)
            if record.status == "executing" and alive:
                continue
            if record.status == "executing" and (
                record.attempt >= self.config.runs.max_attempts or record.agent_id not in self.config.loaded
            ):
                why = (
                    f"its server stopped and it was started {record.attempt} times (runs.max_attempts)"
                    if record.agent_id in self.config.loaded
                    else "its agent is no longer hosted"
                )
                await background.needs_resume(workspace, record, version, why)
                continue
            if record.session_id is None:
                if record.status == "executing" or not alive:
                    background.launch(workspace, run_id)
                continue
            # A queued run of a live server is in its session's document, or on its way there.
            start = await self.workspaces.queues(workspace).recover(
                record.agent_id, record.session_id, run_id, lost=not alive
            )
            if start is not None:
                background.launch(workspace, start)
