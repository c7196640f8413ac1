"""The run service: every hosted operation, for the HTTP routes, the dashboard and the protocol doors.

| operation | what |
| --- | --- |
| ``invoke`` | run an invocation to its answer (``admission.py``): its key, its session by policy, the run |
| ``events`` | the same, its events given as they are kept (a streamed invoke) |
| ``stream`` | the same, as ``(name, data)`` for the protocol doors |
| ``start`` | start a background run (202) |
| ``follow`` | a run's events after an id, then live, on whichever server it runs |
| ``cancel``, ``resume`` | stop a run; start a stopped or stranded one again |
| ``move`` | continue a stopped or stranded pipeline run on the Temporal workers (``workers.py``) |
| ``answer`` | answer a run's open interrupt (a background run on its session) |
| ``send_event`` | send an event to a run's session; waits that take it are woken (``timers.py``) |
| ``run_record``, ``list_runs`` | run records, settled from their sessions when their server is gone |
| ``search_runs``, ``search_sessions`` | filtered, time-ordered pages with a cursor (``search.py``) |
| ``list_sessions``, ``describe_session``, ``delete_session`` | a hosted agent's sessions |
| ``schedules`` | scheduled runs (``scheduler.py``): created, listed, paused, run now; their ticks run here |
| ``create_schedule``, ``delete_schedule`` | the same, with the session check and the audit entry |

**Ownership** (``identity.py``): what a caller creates records it as owner; a caller that does not see
its whole workspace reads and acts only on its own sessions, runs and schedules, another's answered as
unknown (404). The checks are here (or in the parts it holds: ``schedules``), so every door that calls the
service has them.

A request goes down once: the service hands it to the part that does it, which is given what it needs
(storage views, this server's runs in progress, the executor) and never calls back up. ``running`` is
the service's life (the app's lifespan): this server's heartbeat, background runs, stop requests from
other servers, sweeps.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import anyio

from orchestra.hosting.admission import Admission
from orchestra.hosting.audit import AuditLog
from orchestra.hosting.background import BackgroundRuns
from orchestra.hosting.building import Builder
from orchestra.hosting.config import REPLACING, HostedSpec, ServerConfig
from orchestra.hosting.events import EventLog
from orchestra.hosting.execution import Executor, RunOutcome
from orchestra.hosting.identity import caller, may_call, visible
from orchestra.hosting.invocation import Invocation
from orchestra.hosting.outcomes import Refused
from orchestra.hosting.ownership import SessionOwners
from orchestra.hosting.quotas import Quotas
from orchestra.hosting.reader import RunReader
from orchestra.hosting.records import RunRecord, RunStore
from orchestra.hosting.running import Running
from orchestra.hosting.scheduler import Scheduler
from orchestra.hosting.schedules import Schedule
from orchestra.hosting.search import Finder, Query, SessionHit
from orchestra.hosting.session_queue import SessionQueues
from orchestra.hosting.sessions import ScopeView, Sessions, SessionSummary, UnknownSession
from orchestra.hosting.stops import Stops
from orchestra.hosting.streaming import StreamEvent, Streaming
from orchestra.hosting.takeover import Sweeps
from orchestra.hosting.timers import Waits
from orchestra.hosting.webhooks import Webhooks
from orchestra.hosting.workers import no_session, not_replacing
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
        self.finder = Finder(self.workspaces, self.reader, self.session_views)
        self.quotas = Quotas(config.quotas, self.workspaces.storage)
        if self.quotas.active:
            self.executor.quotas = self.quotas
        # Ownership costs storage operations only where a caller may be one user (a JWT, the hook, or a
        # key with roles); with workspace-wide keys only, every caller sees its whole workspace anyway.
        self.tenancy = bool(
            config.auth.jwt or config.auth.hook or any(k.roles is not None for k in config.api_keys)
        )
        self.waits = Waits(config, self.workspaces, self.reader, self.admission)
        self.schedules = Scheduler(
            config, self.workspaces, self.background, tenancy=self.tenancy, quotas=self.quotas
        )

    # -- life --------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve (the app's lifespan): this server's heartbeat (other servers on the storage learn that it
        runs its runs), background runs, stop requests made on other servers, sweeps. On exit the records
        still queued are written, and the runs left here are taken over by the servers that remain."""
        await self.liveness.start()
        try:
            async with self.background.running() as group:
                group.start_soon(self.stops.watch)
                group.start_soon(self.sweeps.sweep_forever)
                group.start_soon(self.schedules.run_forever)
                if self.config.audit.enabled:
                    group.start_soon(self._prune_audit)
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
        await self.admit(workspace, invocation)
        return await self.admission.invoke(workspace, invocation, log)

    async def events(self, workspace: str, invocation: Invocation) -> AsyncIterator[StreamEvent]:
        """Run an invocation here, its events as they are kept, then its last event (``Streaming.events``)."""
        try:
            await self.admit(workspace, invocation)
        except Refused as exc:  # as the stream's other refusals: its last event
            yield (None, "error", {"error": {"code": exc.code, "message": exc.message}, "run_id": None})
            return
        async with contextlib.aclosing(_generator(self.streaming.events(workspace, invocation))) as events:
            async for event in events:  # closed here when the caller stops reading: the run stops with it
                yield event

    async def stream(self, workspace: str, invocation: Invocation) -> AsyncIterator[tuple[str, Any]]:
        """Run an invocation here, its events as ``(name, data)`` (``Streaming.stream``)."""
        await self.admit(workspace, invocation)
        async with contextlib.aclosing(_generator(self.streaming.stream(workspace, invocation))) as events:
            async for event in events:
                yield event

    def follow(self, workspace: str, run_id: str, after: int) -> AsyncIterator[StreamEvent]:
        """A run's events after id ``after``, then live, then its last event (``Streaming.follow``); the
        caller reads the run's record first (``run_record``: another user's run is not found)."""
        return self.streaming.follow(workspace, run_id, after)

    async def start(self, workspace: str, invocation: Invocation) -> tuple[RunRecord, bool]:
        """Start a background run, or answer a repeated key with the first run (``Admission.start``)."""
        await self.admit(workspace, invocation)
        return await self.admission.start(workspace, invocation)

    async def answer(
        self, workspace: str, hosted: HostedSpec, session_id: str, answers: dict[str, Any]
    ) -> RunRecord:
        """Answer open interrupts of a session with a background run on it (by the agent's policy)."""
        invocation = Invocation(
            hosted, None, session_id, None, responses=answers, on_busy=self.config.on_busy(hosted)
        )
        await self.admit(workspace, invocation)
        return await self.background.start(workspace, invocation)

    async def admit(self, workspace: str, invocation: Invocation) -> None:
        """Refuse, as unknown (404), an agent the caller may not call or a session that is not its; a new
        session becomes the caller's. Once per invocation (a door may admit it before it streams)."""
        if invocation.admitted:
            return
        if not may_call(invocation.hosted):
            raise Refused(404, "unknown_agent", f"no agent {invocation.hosted.id!r} in this workspace")
        if self.executor.on_workers(invocation):
            if invocation.session_id is None:
                raise no_session(invocation.hosted.id)
            if invocation.on_busy in REPLACING:
                raise not_replacing(invocation.hosted.id, invocation.on_busy)
        if invocation.session_id is not None and not await self.may_use_session(
            workspace, invocation.hosted.id, invocation.session_id, create=True
        ):
            raise UnknownSession(invocation.hosted.id, invocation.session_id)
        if self.quotas.active:  # 429 if a quota is spent; else the run counts
            await self.quotas.admit(workspace, invocation.owner, invocation.run_id)
        invocation.admitted = True
        action = (
            "interrupt.answer"
            if invocation.responses
            else "run.resume"
            if invocation.resume
            else "run.create"
        )
        await self.audit(workspace, action, invocation.hosted.id, invocation.session_id, invocation.run_id)

    async def audit(
        self,
        workspace: str,
        action: str,
        agent_id: str,
        session_id: str | None,
        run_id: str | None,
        **target: str | None,
    ) -> None:
        """Append to the workspace's audit log (``audit.py``), when the config keeps one (``target``: more
        ids, e.g. ``schedule_id``)."""
        if self.config.audit.enabled:
            await AuditLog(self.workspaces.storage(workspace)).record(
                action, agent_id=agent_id, session_id=session_id, run_id=run_id, **target
            )

    async def audit_entries(self, workspace: str, **filters: Any) -> list[dict[str, Any]]:
        """The workspace's audit log, filtered (``AuditLog.entries``)."""
        return await AuditLog(self.workspaces.storage(workspace)).entries(**filters)

    async def _prune_audit(self) -> None:
        """Delete audit days older than ``audit.retention_days``, at start and every hour."""
        while True:
            for workspace in self.workspaces.all():
                with contextlib.suppress(Exception):  # housekeeping: tried again in an hour
                    await AuditLog(self.workspaces.storage(workspace)).prune(self.config.audit.retention_days)
            await anyio.sleep(3600)

    async def usage(self, workspace: str) -> list[dict[str, Any]]:
        """What the caller's quotas have spent this period, and when each resets."""
        found = caller()
        return await self.quotas.usage(workspace, None if found is None else found.user)

    async def may_use_session(self, workspace: str, agent_id: str, session_id: str, *, create: bool) -> bool:
        """Whether the caller may read or use a session (``create``: one nobody owns becomes its)."""
        if not self.tenancy:
            return True
        return await self.owners(workspace).may_use(agent_id, session_id, create=create)

    def owners(self, workspace: str) -> SessionOwners:
        """Who owns the workspace's sessions (``ownership.py``)."""
        return SessionOwners(self.workspaces.storage(workspace))

    async def send_event(self, workspace: str, record: RunRecord, name: str, payload: Any, key: str) -> bool:
        """Send an event to a run's session, once per key (``Waits.send_event``)."""
        return await self.waits.send_event(workspace, record, name, payload, key)

    # -- schedules (the rest: ``self.schedules``) -----------------------------------------------------

    async def create_schedule(self, workspace: str, schedule: Schedule) -> Schedule:
        """Create a schedule (``Scheduler.create``) for the caller; one whose runs continue a session needs
        the session to be the caller's (or new: it becomes the caller's), else it is unknown (404)."""
        if schedule.session == "continue":
            session_id = schedule.session_id or schedule.id
            if not await self.may_use_session(workspace, schedule.agent, session_id, create=True):
                raise UnknownSession(schedule.agent, session_id)
        made = await self.schedules.create(workspace, schedule)
        await self.audit(workspace, "schedule.create", made.agent, None, None, schedule_id=made.id)
        return made

    async def delete_schedule(self, workspace: str, schedule_id: str) -> None:
        """Delete a schedule the caller sees (``Scheduler.delete``)."""
        deleted = await self.schedules.delete(workspace, schedule_id)
        await self.audit(workspace, "schedule.delete", deleted.agent, None, None, schedule_id=schedule_id)

    async def pause_schedule(self, workspace: str, schedule_id: str, paused: bool) -> Schedule:
        """Pause or resume a schedule the caller sees (``Scheduler.set_paused``)."""
        changed = await self.schedules.set_paused(workspace, schedule_id, paused)
        action = "schedule.pause" if paused else "schedule.resume"
        await self.audit(workspace, action, changed.agent, None, None, schedule_id=schedule_id)
        return changed

    async def run_schedule(self, workspace: str, schedule_id: str) -> RunRecord:
        """Start a schedule's run now (``Scheduler.run_now``)."""
        record = await self.schedules.run_now(workspace, schedule_id)
        await self.audit(
            workspace,
            "schedule.run",
            record.agent_id,
            record.session_id,
            record.run_id,
            schedule_id=schedule_id,
        )
        return record

    async def cancel(self, workspace: str, record: RunRecord) -> None:
        """Stop a run (``BackgroundRuns.cancel``)."""
        await self.background.cancel(workspace, record)
        await self.audit(workspace, "run.cancel", record.agent_id, record.session_id, record.run_id)

    async def resume(self, workspace: str, record: RunRecord, hosted: HostedSpec) -> RunRecord:
        """Start a stopped or stranded run again (``BackgroundRuns.resume``)."""
        resumed = await self.background.resume(workspace, record, hosted)
        await self.audit(workspace, "run.resume", record.agent_id, record.session_id, resumed.run_id)
        return resumed

    async def move(self, workspace: str, record: RunRecord, hosted: HostedSpec) -> RunRecord:
        """Continue a stopped, failed or stranded pipeline run on the Temporal workers (``workers.py``), as
        a new background run: its completed nodes are not run again (``BackgroundRuns.resume``).

        Raises:
            Refused: this server names no workers (409), or the run is an agent's turn (409).
        """
        if self.config.temporal is None:
            raise Refused(
                409,
                "no_workers",
                "this server names no Temporal workers: set temporal: in its config, or start it with "
                "orchestra serve --temporal URI",
            )
        if record.kind == "agent":
            raise Refused(
                409,
                "not_movable",
                f"run {record.run_id} is an agent's turn: only graphs and swarms run on workers",
            )
        moved = await self.background.resume(workspace, record, hosted, on_workers=True)
        await self.audit(workspace, "run.move", record.agent_id, record.session_id, moved.run_id)
        return moved

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
        """A run's record, settled from its session if its server stopped before it was final (None: no
        such run, or not the caller's)."""
        record = await self.reader.run_record(workspace, run_id)
        return record if record is not None and visible(record.owner) else None

    async def list_runs(
        self, workspace: str, agent_ids: list[str], session_id: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Run records, newest first, each settled like ``run_record`` (the caller's own)."""
        records = await self.reader.list_runs(workspace, agent_ids, session_id, limit)
        return [record for record in records if visible(record.owner)]

    async def search_runs(
        self, workspace: str, agent_ids: list[str], session_id: str | None, query: Query
    ) -> tuple[list[RunRecord], str | None]:
        """A page of runs that match ``query`` and the next page's cursor (``search.py``): the caller's own,
        so a page may hold fewer than ``query.limit`` when others' runs fall in it."""
        records, cursor = await self.finder.runs(workspace, agent_ids, session_id, query)
        return [record for record in records if visible(record.owner)], cursor

    async def search_sessions(
        self, workspace: str, agent_ids: list[str], query: Query
    ) -> tuple[list[SessionHit], str | None]:
        """A page of sessions that match ``query`` (by their latest run) and the next page's cursor: the
        caller's own (a page may be short, as for runs)."""
        hits, cursor = await self.finder.sessions_of(workspace, agent_ids, query)
        found = caller()
        if not self.tenancy or found is None or found.sees_workspace:
            return hits, cursor
        own = {agent_id: await self.owners(workspace).owned(agent_id, found.user) for agent_id in agent_ids}
        return [hit for hit in hits if hit.session_id in own.get(hit.agent_id, ())], cursor

    # -- sessions ----------------------------------------------------------------------------------

    async def list_sessions(self, workspace: str, agent_id: str) -> list[SessionSummary]:
        listed = await self.session_views.summaries(workspace, agent_id)
        found = caller()
        if not self.tenancy or found is None or found.sees_workspace:
            return listed
        own = await self.owners(workspace).owned(agent_id, found.user)
        return [summary for summary in listed if summary.session_id in own]

    async def describe_session(self, workspace: str, agent_id: str, session_id: str) -> list[ScopeView]:
        if not await self.may_use_session(workspace, agent_id, session_id, create=False):
            raise UnknownSession(agent_id, session_id)
        return await self.session_views.describe(workspace, agent_id, session_id)

    async def delete_session(self, workspace: str, agent_id: str, session_id: str) -> None:
        if not await self.may_use_session(workspace, agent_id, session_id, create=False):
            raise UnknownSession(agent_id, session_id)
        # The session's workflow on the workers ends first: else it would go on committing into the
        # session once deleted (a 503 if Temporal cannot say, and nothing is deleted).
        await self.executor.workers.stop_session(workspace, agent_id, session_id)
        await self.session_views.delete(workspace, agent_id, session_id)
        if self.tenancy:
            await self.owners(workspace).forget(agent_id, session_id)
        await self.audit(workspace, "session.delete", agent_id, session_id, None)

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


def _generator(events: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
    """An async generator's declared iterator, as the generator it is (so that it can be closed)."""
    assert isinstance(events, AsyncGenerator)
    return events
