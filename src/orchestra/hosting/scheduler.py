"""Scheduled runs on every server of a storage, each tick run once (the rules of a tick: ``schedules.py``).

What is stored, under the workspace (``ws/<workspace>/``):

| key | what |
| --- | --- |
| ``schedules/<id>.json`` | the schedule, and whether it is paused (changed by compare-and-swap) |
| ``schedule-ticks/<id>/<tick>.json`` | one record per tick (or per run of missed ticks), create-only |
| ``schedule-open/<id>/<tick>`` | a tick being claimed: written (with fsync) before its record, deleted once it ran |
| ``schedule-cursor/<id>`` | the last tick accounted for (a hint: a server starts from it) |
| ``schedule-floor/<id>`` | the key of the oldest tick record kept: every tick before it was accounted for |

How a tick runs: every server reads the schedules every second at most (and wakes at the next tick). For
a due tick, a server writes its open marker, then creates the tick's record (``expect=ABSENT``) naming a
new run id: of any number of servers, one creates it; the others read it and go on after it. The one
that created it queues a background run with that id (``background.py``: from then on a run of a server
that dies is taken over by the sweeps of ``takeover.py``), marks the record ``started`` and deletes the
marker.

A server killed between the record and the run: its marker stays. Every ``runs.sweep_s`` each server
reads the markers: a record ``claimed`` by a gone server (``liveness.py``) is taken over by
compare-and-swap (``taken_over`` + 1) and its run queued, unless the run's record shows it was queued
already. A marker without a record (its server died before writing it) is left to the servers' loops,
which make that record in turn, and deleted once this server's loop is past its tick. So a tick's run is
queued once, and its record says what happened to it.

Pruning (the rules, and why no tick runs twice: ``schedules.py``): the server that makes the first record
of a ``schedule_ticks.prune_every_s`` period starts the schedule's prune in a task of its own (one at a time
per schedule; the ticks do not wait for it). It lists the schedule's records, then its open claims, and in
steps of at most ``PRUNE_STEP`` stores the floor ``schedules.prune`` gives, then deletes the records below
it. A server that made a record reads the floor after it; so does a sweep before it finishes a claim: a
record below the floor is a leftover of a server that was behind, deleted and never run.

Ownership (``identity.py``): a schedule made over the API records its caller's user as ``owner`` (the
config's have none); a caller that does not see its whole workspace lists, reads and acts only on its own
schedules, another's answered as unknown (404). The runs a schedule starts, and their sessions, are its
owner's: they count against the owner's quotas, and a session another user owns refuses the run.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

import anyio
from anyio.abc import TaskGroup

from orchestra._logging import get_logger
from orchestra.errors import OrchestraError, StorageConflictError, StorageError
from orchestra.hosting.background import BackgroundRuns
from orchestra.hosting.config import HostedSpec, ServerConfig
from orchestra.hosting.identity import may_call, memory_subject, owner, visible
from orchestra.hosting.invocation import Invocation, input_text
from orchestra.hosting.outcomes import Refused
from orchestra.hosting.ownership import SessionOwners
from orchestra.hosting.quotas import Quotas
from orchestra.hosting.records import RunRecord
from orchestra.hosting.schedules import (
    PRUNE_STEP,
    Schedule,
    Tick,
    TickRecord,
    TickRetention,
    due,
    key_time,
    plan,
    prune,
    prune_due,
)
from orchestra.hosting.sessions import UnknownSession
from orchestra.hosting.workspaces import Workspaces
from orchestra.session import uuid7
from orchestra.storage import ABSENT, Storage, delete_many, read_many

__all__ = ["ScheduleStore", "Scheduler", "UnknownSchedule"]

log = get_logger("orchestra.server")

_MAX_WAIT_S = 1.0  # schedules changed on another server are seen within this


class UnknownSchedule(Refused):
    def __init__(self, schedule_id: str) -> None:
        super().__init__(404, "unknown_schedule", f"there is no schedule {schedule_id!r} in this workspace")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


class ScheduleStore:
    """A workspace's schedules and tick records (the keys of the module docstring)."""

    def __init__(self, storage: Storage, unsynced: Storage) -> None:
        self.storage = storage
        self.unsynced = unsynced

    async def all(self) -> list[tuple[Schedule, str]]:
        keys = await self.storage.list("schedules/")
        found = await read_many(self.storage, keys)
        return [(Schedule.model_validate_json(f[0]), f[1]) for f in found if f is not None]

    async def get(self, schedule_id: str) -> tuple[Schedule, str] | None:
        found = await self.storage.read(f"schedules/{schedule_id}.json")
        return None if found is None else (Schedule.model_validate_json(found[0]), found[1])

    async def write(self, schedule: Schedule, expect: Any = None) -> str:
        """Write the schedule (``expect``: ``ABSENT`` to create it, or the version it replaces)."""
        data = schedule.model_dump_json().encode()
        return await self.storage.write(f"schedules/{schedule.id}.json", data, expect=expect)

    async def delete(self, schedule_id: str) -> None:
        await self.storage.delete(f"schedules/{schedule_id}.json")
        await self.unsynced.delete(f"schedule-cursor/{schedule_id}")
        await self.storage.delete_prefix(f"schedule-ticks/{schedule_id}/")
        await self.storage.delete(f"schedule-floor/{schedule_id}")

    async def cursor(self, schedule_id: str) -> datetime | None:
        found = await self.unsynced.read(f"schedule-cursor/{schedule_id}")
        return None if found is None else _time(found[0].decode())

    async def set_cursor(self, schedule_id: str, cursor: datetime) -> None:
        await self.unsynced.write(f"schedule-cursor/{schedule_id}", cursor.isoformat().encode())

    async def tick(self, schedule_id: str, key: str) -> tuple[TickRecord, str] | None:
        found = await self.storage.read(f"schedule-ticks/{schedule_id}/{key}.json")
        return None if found is None else (TickRecord.model_validate_json(found[0]), found[1])

    async def ticks(self, schedule_id: str, limit: int = 100) -> list[TickRecord]:
        """The schedule's tick records, oldest first (a listing of the schedule's records, then reads)."""
        keys = await self.storage.list(f"schedule-ticks/{schedule_id}/")
        found = await read_many(self.storage, keys[-limit:])
        return [TickRecord.model_validate_json(f[0]) for f in found if f is not None]

    async def tick_keys(self, schedule_id: str) -> list[str]:
        """The keys of the schedule's tick records, oldest first."""
        prefix = f"schedule-ticks/{schedule_id}/"
        return sorted(k[len(prefix) : -len(".json")] for k in await self.storage.list(prefix))

    async def delete_ticks(self, schedule_id: str, keys: list[str]) -> None:
        if keys:
            await delete_many(self.storage, [f"schedule-ticks/{schedule_id}/{k}.json" for k in keys])

    async def floor(self, schedule_id: str) -> tuple[str, str] | None:
        """The key of the oldest record kept (every tick before it was accounted for), and its version."""
        found = await self.storage.read(f"schedule-floor/{schedule_id}")
        return None if found is None else (found[0].decode(), found[1])

    async def raise_floor(self, schedule_id: str, key: str) -> None:
        """Store ``key`` as the floor unless it is there or higher already (compare-and-swap: never lower)."""
        while True:
            found = await self.floor(schedule_id)
            if found is not None and found[0] >= key:
                return
            expect = ABSENT if found is None else found[1]
            with contextlib.suppress(StorageConflictError):  # another server's prune: read it again
                await self.storage.write(f"schedule-floor/{schedule_id}", key.encode(), expect=expect)
                return

    async def prune(
        self, schedule_id: str, retention: TickRetention, now: datetime, step: int = PRUNE_STEP
    ) -> int:
        """Delete the records past ``retention`` (``schedules.prune`` decides) in steps of at most ``step``:
        each step stores its floor, then deletes the records below it. How many were deleted."""
        keys = await self.tick_keys(schedule_id)
        # Listed after the records: a record listed as claimed still had its marker (written first) when
        # the records were listed, so a claim missing here was finished before.
        opened = {key for _, key in await self.opened(schedule_id)}
        found = await self.floor(schedule_id)
        floor, deleted = None if found is None else found[0], 0
        while (decided := prune(keys, opened, floor, now, retention, step)).delete:
            if decided.floor is not None:
                await self.raise_floor(schedule_id, decided.floor)
                floor = decided.floor
            await self.delete_ticks(schedule_id, decided.delete)
            deleted += len(decided.delete)
            keys = keys[len(decided.delete) :]  # (the oldest ones: ``tick_keys`` are in order)
        return deleted

    async def write_tick(self, key: str, record: TickRecord, expect: Any) -> str:
        """Create (``expect=ABSENT``) or replace a tick record; ``StorageConflictError`` if it changed."""
        path = f"schedule-ticks/{record.schedule_id}/{key}.json"
        return await self.storage.write(path, record.as_json(), expect=expect)

    async def open(self, schedule_id: str, key: str) -> None:
        # Durable (fsync): the floor never passes an open claim, so a record that outlives a power cut
        # must not outlive its marker.
        await self.storage.write(f"schedule-open/{schedule_id}/{key}", b"")

    async def close(self, schedule_id: str, key: str) -> None:
        await self.unsynced.delete(f"schedule-open/{schedule_id}/{key}")

    async def opened(self, schedule_id: str | None = None) -> list[tuple[str, str]]:
        """The markers of ticks being claimed (of one schedule, or all): (schedule id, tick key)."""
        keys = await self.storage.list(f"schedule-open/{schedule_id}/" if schedule_id else "schedule-open/")
        return [(k.split("/")[1], k.split("/")[2]) for k in keys]


class Scheduler:
    """This server's part in running the schedules of every workspace (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        workspaces: Workspaces,
        background: BackgroundRuns | None = None,
        *,
        tenancy: bool = False,
        quotas: Quotas | None = None,
    ) -> None:
        self.config = config
        self.quotas = quotas  # a run counts against its owner's quotas (429 refuses it)
        self.tenancy = tenancy  # sessions have owners (RunService.tenancy): a run's session is its owner's
        self.workspaces = workspaces
        self.background = background
        self.liveness = workspaces.liveness
        self.retention: TickRetention = config.schedule_ticks
        self._cursors: dict[tuple[str, str], datetime] = {}
        self._starting: set[tuple[str, str, str]] = set()  # ticks whose run this server is queueing
        self._unhosted: set[tuple[str, str]] = set()  # schedules whose agent is not hosted (logged)
        self._pruning: set[tuple[str, str]] = set()  # schedules this server prunes now (one prune each)

    def store(self, workspace: str) -> ScheduleStore:
        return ScheduleStore(self.workspaces.storage(workspace), self.workspaces.unsynced(workspace))

    # -- the schedules -----------------------------------------------------------------------------

    async def sync_config(self) -> None:
        """Write the config's schedules to the storage (creating them, or updating what they say while
        keeping whether they are paused): every server does it at start; the storage decides."""
        for schedule in self.config.schedules:
            workspace = schedule.workspace or ""
            store = self.store(workspace)
            for _ in range(5):  # another server writing the same at once: read it again
                found = await store.get(schedule.id)
                try:
                    if found is None:
                        fresh = schedule.model_copy(update={"after": datetime.now(UTC).isoformat()})
                        await store.write(fresh, ABSENT)
                    elif found[0].definition() != schedule.definition():
                        kept = {"paused": found[0].paused, "after": found[0].after}
                        await store.write(schedule.model_copy(update=kept), found[1])
                    break
                except StorageConflictError:
                    continue

    async def listed(self, workspace: str) -> list[Schedule]:
        """The workspace's schedules the caller sees, by id."""
        found = (s for s, _ in await self.store(workspace).all() if visible(s.owner))
        return sorted(found, key=lambda s: s.id)

    async def get(self, workspace: str, schedule_id: str) -> Schedule:
        """A schedule the caller sees (``UnknownSchedule``, 404, for another user's)."""
        found = await self.store(workspace).get(schedule_id)
        if found is None or not visible(found[0].owner):
            raise UnknownSchedule(schedule_id)
        return found[0]

    async def create(self, workspace: str, schedule: Schedule) -> Schedule:
        """Store a new schedule of the workspace; its ticks count from now.

        Raises:
            Refused: its agent is not hosted in the workspace (404), or the id is taken (409).
        """
        self.hosted(workspace, schedule.agent)
        schedule = schedule.model_copy(
            update={
                "workspace": workspace,
                "after": datetime.now(UTC).isoformat(),
                "source": "api",
                "owner": owner(),
                "memory_subject": memory_subject(),
            }
        )
        try:
            await self.store(workspace).write(schedule, ABSENT)
        except StorageConflictError:
            raise Refused(409, "schedule_exists", f"schedule {schedule.id!r} exists already") from None
        return schedule

    async def delete(self, workspace: str, schedule_id: str) -> Schedule:
        """Delete a schedule made over the API (409 for the config's); the schedule deleted."""
        schedule = await self.get(workspace, schedule_id)
        if any(s.id == schedule_id and s.workspace == workspace for s in self.config.schedules):
            raise Refused(
                409,
                "schedule_in_config",
                f"schedule {schedule_id!r} is in the server config: remove it there (or pause it)",
            )
        await self.store(workspace).delete(schedule_id)
        self._cursors.pop((workspace, schedule_id), None)
        return schedule

    async def set_paused(self, workspace: str, schedule_id: str, paused: bool) -> Schedule:
        """Pause or resume: a resumed schedule's ticks count from now (those of the pause are not missed)."""
        store = self.store(workspace)
        while True:
            found = await store.get(schedule_id)
            if found is None or not visible(found[0].owner):
                raise UnknownSchedule(schedule_id)
            schedule, version = found
            if schedule.paused == paused:
                return schedule
            update: dict[str, Any] = {"paused": paused}
            if not paused:
                update["after"] = datetime.now(UTC).isoformat()
            changed = schedule.model_copy(update=update)
            try:
                await store.write(changed, version)
            except StorageConflictError:
                continue
            self._cursors.pop((workspace, schedule_id), None)
            return changed

    async def run_now(self, workspace: str, schedule_id: str) -> RunRecord:
        """Start the schedule's run now, outside its ticks (paused or not)."""
        schedule = await self.get(workspace, schedule_id)
        now = datetime.now(UTC).replace(microsecond=0)
        return await self._queue(workspace, schedule, now, str(uuid7()), {"schedule_trigger": "manual"})

    def hosted(self, workspace: str, agent_id: str) -> HostedSpec:
        """The hosted agent a schedule of the workspace runs (``Refused`` 404 if there is none, or the caller
        may not call it)."""
        hosted = next((h for h in self.config.agents if h.id == agent_id), None)
        if hosted is None or hosted.workspace != workspace or not may_call(hosted):
            raise Refused(404, "unknown_agent", f"no agent {agent_id!r} is hosted in this workspace")
        return hosted

    # -- the ticks ---------------------------------------------------------------------------------

    async def run_forever(self) -> None:
        """Run the ticks of every workspace's schedules, and sweep the claims of gone servers every
        ``runs.sweep_s`` (a storage failure is logged; the next round tries again)."""
        while True:
            try:
                await self.sync_config()
                break
            except (OrchestraError, OSError) as exc:
                log.warning("schedules_not_synced", error=f"{type(exc).__name__}: {exc}")
                await anyio.sleep(self.config.runs.sweep_s)
        async with anyio.create_task_group() as prunes:
            await self._tick_forever(prunes)

    async def _tick_forever(self, prunes: TaskGroup) -> None:
        swept = anyio.current_time()
        while True:
            wait = _MAX_WAIT_S
            for workspace in self.workspaces.all():
                try:
                    wait = min(wait, await self.advance(workspace, prunes))
                    if anyio.current_time() - swept >= self.config.runs.sweep_s:
                        await self.sweep(workspace)
                except (OrchestraError, OSError) as exc:
                    log.warning("schedules_failed", workspace=workspace, error=f"{type(exc).__name__}: {exc}")
            if anyio.current_time() - swept >= self.config.runs.sweep_s:
                swept = anyio.current_time()
            await anyio.sleep(max(wait, 0.01))

    async def advance(self, workspace: str, prunes: TaskGroup) -> float:
        """Account for every due tick of the workspace's schedules; the seconds until the next one. A
        prune that is due runs in ``prunes``, on its own: the ticks do not wait for it."""
        store, wait = self.store(workspace), _MAX_WAIT_S
        for schedule, _ in await store.all():
            if schedule.paused or not self._runnable(workspace, schedule):
                continue
            cursor = await self._cursor(store, workspace, schedule)
            while (tick := plan(schedule, cursor, datetime.now(UTC))) is not None:
                last, made = await self.claim(workspace, schedule, tick)
                if made and prune_due(cursor, tick, self.retention.prune_every_s):
                    self._start_prune(prunes, workspace, schedule.id)
                cursor = self._cursors[(workspace, schedule.id)] = last
                with contextlib.suppress(StorageError):
                    await store.set_cursor(schedule.id, cursor)
            wait = min(wait, (due(schedule, cursor) - datetime.now(UTC)).total_seconds())
        return wait

    def _runnable(self, workspace: str, schedule: Schedule) -> bool:
        try:
            self.hosted(workspace, schedule.agent)
        except Refused:
            if (workspace, schedule.id) not in self._unhosted:  # said once, not every second
                self._unhosted.add((workspace, schedule.id))
                log.warning("schedule_agent_not_hosted", schedule_id=schedule.id, agent_id=schedule.agent)
            return False
        return True

    async def _cursor(self, store: ScheduleStore, workspace: str, schedule: Schedule) -> datetime:
        """The last tick accounted for: this server's, else the stored hint, never before ``after``."""
        cursor = self._cursors.get((workspace, schedule.id))
        if cursor is None:
            cursor = await store.cursor(schedule.id)
        after = _time(schedule.after) if schedule.after else datetime.now(UTC)
        return max(cursor, after) if cursor is not None else after

    async def claim(self, workspace: str, schedule: Schedule, tick: Tick) -> tuple[datetime, bool]:
        """Account for the tick: its record made here (create-only) and its run queued, or the one another
        server made. The last tick accounted for (the new cursor), and whether this server made it."""
        store = self.store(workspace)
        found = await store.tick(schedule.id, tick.key)
        if found is not None:
            return _time(found[0].last), False
        await store.open(schedule.id, tick.key)
        runs = tick.runs or schedule.missed == "run_once"
        record = TickRecord(
            schedule_id=schedule.id,
            first=tick.first.isoformat(),
            last=tick.last.isoformat(),
            count=tick.count,
            missed=tick.missed,
            policy=schedule.missed if tick.missed else None,
            status="claimed" if runs else "skipped",
            run_id=str(uuid7()) if runs else None,
            server=self.liveness.server_id,
            claimed_at=datetime.now(UTC).isoformat(),
        )
        try:
            version = await store.write_tick(tick.key, record, ABSENT)
        except StorageConflictError:
            found = await store.tick(schedule.id, tick.key)
            if found is not None:
                return _time(found[0].last), False
            if await self._pruned(store, schedule.id, tick.key):  # made and pruned meanwhile
                return await self._from_floor(store, schedule.id, tick), False
            return tick.last, False  # the schedule was deleted meanwhile
        if await self._pruned(store, schedule.id, tick.key):
            # This server was behind: the tick had been run, and its record pruned (schedules.py).
            log.warning("schedule_tick_pruned_already", schedule_id=schedule.id, tick=tick.key)
            await store.delete_ticks(schedule.id, [tick.key])
            await store.close(schedule.id, tick.key)
            return await self._from_floor(store, schedule.id, tick), False
        if runs:
            await self._start(workspace, schedule, tick.key, record, version)
        else:
            log.info(
                "schedule_ticks_skipped", schedule_id=schedule.id, first=record.first, count=record.count
            )
            await store.close(schedule.id, tick.key)
        return tick.last, True

    async def _pruned(self, store: ScheduleStore, schedule_id: str, key: str) -> bool:
        """Whether the tick is below the floor: accounted for, and its record pruned."""
        floor = await store.floor(schedule_id)
        return floor is not None and key < floor[0]

    async def _from_floor(self, store: ScheduleStore, schedule_id: str, tick: Tick) -> datetime:
        """Where a server behind the floor goes on from: the last tick of the floor's record."""
        floor = await store.floor(schedule_id)
        if floor is None:  # the schedule was deleted meanwhile
            return tick.last
        found = await store.tick(schedule_id, floor[0])
        # Without its record (pruned since by a newer floor), the floor's tick is still accounted for.
        return key_time(floor[0]) if found is None else _time(found[0].last)

    def _start_prune(self, prunes: TaskGroup, workspace: str, schedule_id: str) -> None:
        """Prune the schedule in a task of its own, unless this server prunes it already (the next
        period's prune then does what is left)."""
        if (workspace, schedule_id) not in self._pruning:
            self._pruning.add((workspace, schedule_id))
            prunes.start_soon(self._prune_logged, workspace, schedule_id)

    async def _prune_logged(self, workspace: str, schedule_id: str) -> None:
        try:
            await self.prune_ticks(workspace, schedule_id)
        except (OrchestraError, OSError) as exc:  # the next period's prune finishes it
            log.warning(
                "schedule_prune_failed", schedule_id=schedule_id, error=f"{type(exc).__name__}: {exc}"
            )
        finally:
            self._pruning.discard((workspace, schedule_id))

    async def prune_ticks(self, workspace: str, schedule_id: str) -> None:
        """Delete the schedule's tick records past ``schedule_ticks`` (``ScheduleStore.prune``)."""
        deleted = await self.store(workspace).prune(schedule_id, self.retention, datetime.now(UTC))
        if deleted:
            log.info("schedule_ticks_pruned", schedule_id=schedule_id, deleted=deleted)

    async def _start(
        self, workspace: str, schedule: Schedule, key: str, record: TickRecord, version: str
    ) -> None:
        """Queue the run a claimed record names (unless it was queued already), then mark it started."""
        assert record.run_id is not None
        store, mark = self.store(workspace), (workspace, schedule.id, key)
        self._starting.add(mark)
        try:
            if await self.workspaces.runs(workspace).get(record.run_id) is None:
                tick = _time(record.last)
                meta = {"schedule_tick": record.last} | (
                    {"schedule_missed": str(record.count)} if record.missed else {}
                )
                try:
                    await self._queue(workspace, schedule, tick, record.run_id, meta)
                except Refused as exc:  # e.g. its session's queue is full: the record says so
                    log.warning("schedule_run_refused", schedule_id=schedule.id, tick=key, error=exc.message)
                    record.status, record.error = "refused", f"{exc.code}: {exc.message}"
            if record.status == "claimed":
                record.status = "started"
            with contextlib.suppress(StorageConflictError):  # taken for gone meanwhile: the run is queued
                await store.write_tick(key, record, version)
            await store.close(schedule.id, key)
        finally:
            self._starting.discard(mark)

    async def _queue(
        self, workspace: str, schedule: Schedule, tick: datetime, run_id: str, metadata: dict[str, str]
    ) -> RunRecord:
        hosted = self.hosted(workspace, schedule.agent)
        if self.background is None:  # the CLI on a server's storage: it changes schedules, runs nothing
            raise Refused(409, "no_server", "a run starts on a server: use orchestra schedules run-now --url")
        invocation = Invocation(
            hosted, input_text(schedule.run_input(tick)), schedule.run_session(tick), None, on_busy="enqueue"
        )
        session_id = invocation.session_id
        if self.tenancy and schedule.owner is not None and session_id is not None:
            owners = SessionOwners(self.workspaces.storage(workspace))
            if await owners.claim(hosted.id, session_id, schedule.owner) != schedule.owner:
                raise UnknownSession(hosted.id, session_id)  # another user's: the run is refused
        if self.quotas is not None and self.quotas.active:
            await self.quotas.admit(workspace, schedule.owner, run_id)
        invocation.run_id = run_id
        # The owner's run, whoever starts it: its owner sees it, its owner's quotas count it.
        invocation.owner = schedule.owner
        if "memory_subject" in schedule.model_fields_set:  # (one made before it was recorded: the caller's)
            invocation.subject = schedule.memory_subject
        invocation.metadata = {**schedule.metadata, **metadata, "schedule_id": schedule.id}
        return await self.background.start(workspace, invocation)

    async def sweep(self, workspace: str) -> None:
        """Finish the claims that gone servers left (see the module docstring)."""
        store = self.store(workspace)
        schedules = {s.id: s for s, _ in await store.all()}
        for schedule_id, key in await store.opened():
            schedule = schedules.get(schedule_id)
            if (workspace, schedule_id, key) in self._starting:
                continue
            found = await store.tick(schedule_id, key)
            if schedule is None or (found is not None and found[0].status != "claimed"):
                await store.close(schedule_id, key)
                continue
            if found is not None and await self._pruned(store, schedule_id, key):
                # A leftover of a server that was behind and stopped before it deleted it: never run.
                await store.delete_ticks(schedule_id, [key])
                await store.close(schedule_id, key)
                continue
            if found is None:
                # Its server stopped before it made the record. Every server's loop goes through each tick
                # in order, so the tick gets its record (or is in a record of missed ticks) there: once
                # this server's loop is past it, the marker is left over.
                tick = key_time(key)
                passed = self._cursors.get((workspace, schedule_id))
                if passed is not None and tick <= passed:
                    await store.close(schedule_id, key)
                continue
            record, version = found
            if record.server != self.liveness.server_id:
                if await self.liveness.is_alive(record.server):
                    continue
                record.server, record.taken_over = self.liveness.server_id, record.taken_over + 1
                try:
                    version = await store.write_tick(key, record, version)
                except StorageConflictError:
                    continue  # another server took it over first
                log.warning("schedule_claim_taken_over", schedule_id=schedule_id, tick=key)
            await self._start(workspace, schedule, key, record, version)
