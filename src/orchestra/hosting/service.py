"""The run service: every hosted operation, for the HTTP routes, the dashboard and the protocol doors.

| operation | what |
| --- | --- |
| ``invoke`` | run an invocation to its answer (``admission.py``): its key, its session by policy, the run |
| ``events`` | the same, its events given as they are kept (a streamed invoke) |
| ``stream`` | the same, as ``(name, data)`` for the protocol doors |
| ``start`` | start a background run (202) |
| ``follow`` | a run's events after an id, then live, on whichever server it runs |
| ``cancel``, ``resume`` | stop a run; start a stopped or stranded one again |
| ``answer`` | answer a run's open interrupt (a background run on its session) |
| ``send_event`` | send an event to a run's session; waits that take it are woken (``timers.py``) |
| ``run_record``, ``list_runs`` | run records, settled from their sessions when their server is gone |
| ``list_sessions``, ``describe_session``, ``delete_session`` | a hosted agent's sessions |

A request goes down once: the service hands it to the part that does it, which is given what it needs
(storage views, this server's runs in progress, the executor) and never calls back up. ``running`` is
the service's life (the app's lifespan): this server's heartbeat, background runs, stop requests from
other servers, sweeps.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from orchestra.hosting.admission import Admission
from orchestra.hosting.background import BackgroundRuns
from orchestra.hosting.building import Builder
from orchestra.hosting.config import HostedSpec, ServerConfig
from orchestra.hosting.events import EventLog
from orchestra.hosting.execution import Executor, RunOutcome
from orchestra.hosting.invocation import Invocation
from orchestra.hosting.reader import RunReader
from orchestra.hosting.records import RunRecord, RunStore
from orchestra.hosting.running import Running
from orchestra.hosting.session_queue import SessionQueues
from orchestra.hosting.sessions import ScopeView, Sessions, SessionSummary
from orchestra.hosting.stops import Stops
from orchestra.hosting.streaming import StreamEvent, Streaming
from orchestra.hosting.takeover import Sweeps
from orchestra.hosting.timers import Waits
from orchestra.hosting.webhooks import Webhooks
from orchestra.hosting.workspaces import Workspaces
from orchestra.storage import Storage

__all__ = ["RunService"]


class RunService:
    """Every hosted operation (see the module docstring)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.workspaces = Workspaces(config)
        self.liveness = self.workspaces.liveness
        self.running_here = Running()
        self.stops = Stops(config.runs.poll_s)
        self.webhooks = Webhooks(config.webhooks)
        self.builder = Builder(config, self.workspaces)
        self.reader = RunReader(config, self.workspaces, self.running_here)
        self.executor = Executor(config, self.workspaces, self.running_here, self.stops, self.builder)
        self.background = BackgroundRuns(
            config, self.workspaces, self.running_here, self.stops, self.executor, self.webhooks
        )
        self.sweeps = Sweeps(self.workspaces, self.running_here, self.stops, self.background)
        self.admission = Admission(
            config,
            self.workspaces,
            self.running_here,
            self.reader,
            self.builder,
            self.executor,
            self.background,
        )
        self.streaming = Streaming(config, self.workspaces, self.running_here, self.reader, self.admission)
        self.session_views = Sessions(self.workspaces, self.builder)
        self.waits = Waits(config, self.workspaces, self.reader, self.admission)

    # -- life --------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve (the app's lifespan): this server's heartbeat (other servers on the storage learn that it
        runs its runs), background runs, stop requests made on other servers, sweeps. On exit the records
        still queued are written, and the runs left here are taken over by the servers that remain."""
        self.liveness.start()
        try:
            async with self.background.running() as group:
                group.start_soon(self.stops.watch)
                group.start_soon(self.sweeps.sweep_forever)
                group.start_soon(self.waits.sweep_forever)
                yield
        finally:
            for workspace in self.workspaces.all():
                await self.flush_records(workspace)
            await self.liveness.stop()

    # -- runs --------------------------------------------------------------------------------------

    async def invoke(self, workspace: str, invocation: Invocation, log: EventLog | None = None) -> RunOutcome:
        """Run an invocation to its answer (see ``Admission.invoke``); the caller answers, then calls
        ``flush_records``."""
        return await self.admission.invoke(workspace, invocation, log)

    def events(self, workspace: str, invocation: Invocation) -> AsyncIterator[StreamEvent]:
        """Run an invocation here, its events as they are kept, then its last event (``Streaming.events``)."""
        return self.streaming.events(workspace, invocation)

    def stream(self, workspace: str, invocation: Invocation) -> AsyncIterator[tuple[str, Any]]:
        """Run an invocation here, its events as ``(name, data)`` (``Streaming.stream``)."""
        return self.streaming.stream(workspace, invocation)

    def follow(self, workspace: str, run_id: str, after: int) -> AsyncIterator[StreamEvent]:
        """A run's events after id ``after``, then live, then its last event (``Streaming.follow``)."""
        return self.streaming.follow(workspace, run_id, after)

    async def start(self, workspace: str, invocation: Invocation) -> tuple[RunRecord, bool]:
        """Start a background run, or answer a repeated key with the first run (``Admission.start``)."""
        return await self.admission.start(workspace, invocation)

    async def answer(
        self, workspace: str, hosted: HostedSpec, session_id: str, answers: dict[str, Any]
    ) -> RunRecord:
        """Answer open interrupts of a session with a background run on it (by the agent's policy)."""
        invocation = Invocation(
            hosted, None, session_id, None, responses=answers, on_busy=self.config.on_busy(hosted)
        )
        return await self.background.start(workspace, invocation)

    async def send_event(self, workspace: str, record: RunRecord, name: str, payload: Any, key: str) -> bool:
        """Send an event to a run's session, once per key (``Waits.send_event``)."""
        return await self.waits.send_event(workspace, record, name, payload, key)

    async def cancel(self, workspace: str, record: RunRecord) -> None:
        """Stop a run (``BackgroundRuns.cancel``)."""
        await self.background.cancel(workspace, record)

    async def resume(self, workspace: str, record: RunRecord, hosted: HostedSpec) -> RunRecord:
        """Start a stopped or stranded run again (``BackgroundRuns.resume``)."""
        return await self.background.resume(workspace, record, hosted)

    async def flush_records(self, workspace: str) -> None:
        """Write the run records queued by finished invocations (after their answers were sent)."""
        await self.workspaces.runs(workspace).flush()

    def storage(self, workspace: str) -> Storage:
        """The workspace's storage, for what a protocol door keeps of its own (A2A tasks)."""
        return self.workspaces.storage(workspace)

    def check_webhook(self, url: str) -> str:
        """The URL, if a run may be started with it (``Webhooks.check``)."""
        return self.webhooks.check(url)

    # -- reading -----------------------------------------------------------------------------------

    async def run_record(self, workspace: str, run_id: str) -> RunRecord | None:
        """A run's record, settled from its session if its server stopped before it was final."""
        return await self.reader.run_record(workspace, run_id)

    async def list_runs(
        self, workspace: str, agent_ids: list[str], session_id: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Run records, newest first, each settled like ``run_record``."""
        return await self.reader.list_runs(workspace, agent_ids, session_id, limit)

    # -- sessions ----------------------------------------------------------------------------------

    async def list_sessions(self, workspace: str, agent_id: str) -> list[SessionSummary]:
        return await self.session_views.summaries(workspace, agent_id)

    async def describe_session(self, workspace: str, agent_id: str, session_id: str) -> list[ScopeView]:
        return await self.session_views.describe(workspace, agent_id, session_id)

    async def delete_session(self, workspace: str, agent_id: str, session_id: str) -> None:
        await self.session_views.delete(workspace, agent_id, session_id)

    # -- what lies below, for tests and benchmarks -------------------------------------------------

    @property
    def root(self) -> Storage:
        """The server's storage (a test may replace it with a wrapper: what is opened later uses that)."""
        return self.workspaces.root

    @root.setter
    def root(self, storage: Storage) -> None:
        self.workspaces.root = storage

    def runs(self, workspace: str) -> RunStore:
        return self.workspaces.runs(workspace)

    def slots(self, workspace: str) -> SessionQueues:
        return self.workspaces.queues(workspace)

    def unsynced(self, workspace: str) -> Storage:
        return self.workspaces.unsynced(workspace)

    def agent_storage(self, workspace: str, agent_id: str) -> Storage:
        return self.workspaces.agent_storage(workspace, agent_id)
