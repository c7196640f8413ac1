"""Schedules: what a scheduled run is, and which tick comes next (pure: no I/O, the clock is an argument).

A schedule names a hosted agent or pipeline, a cron expression read in a time zone (croniter; six fields
put seconds last), the input of each run (``{tick}`` and ``{date}`` are replaced by the tick's time and
day, in the schedule's zone), and its session: ``new`` (a session per run), ``continue`` (every run on
``session_id``, by default the schedule's id) or ``none``.

Ticks are accounted for in order, each by one tick record (``scheduler.py`` writes it create-only, so of
any number of servers one decides it). ``plan`` says what the record after ``cursor`` (the last tick
accounted for) is at ``now``:

- a tick that is due and at most ``missed_after_s`` late is one record, and one run;
- ticks later than that were missed (every server was down): they make one record together, keyed by the
  first of them; ``missed: skip`` runs nothing for them, ``missed: run_once`` runs once for all of them.

Tick records are pruned (``prune`` decides which go; ``TickRetention`` says how many stay). A record is
what stops a second server from running its tick: a server whose cursor is behind (it was paused, or
slow) reads the record of each tick it passes, and creates it if there is none. So a pruned record must
not look like a tick nobody ran. The rule that keeps it so:

- the **floor** is the key of the oldest record kept. Every tick before it has been accounted for. It only
  moves forward, and it is stored before any record below it is deleted;
- a server that *creates* a record reads the floor after the create. A record below the floor was made
  for a tick that had been pruned: it is deleted and not run, and the server goes on from the floor's
  record. Why that is enough: if the record of tick ``k`` was pruned before the create, then the floor
  above ``k`` was stored before that delete, so the read after the create sees it. If not, the create
  conflicts with the record that is there, or ``k`` was never accounted for and is above the floor;
- the floor never passes a tick whose claim is open (its run not queued yet, ``schedule-open/``), nor the
  newest record, so a claim a sweep must finish, and the record the servers' cursors point at, stay.
  Because a record below the floor can then only be such a leftover, a sweep never runs one;
- records below the floor that are still there (a prune that stopped half way) are deleted by the next
  prune;
- a prune goes in steps of at most ``PRUNE_STEP`` deletes, the floor at each step's cap stored before its
  deletes: each step is a prune of its own, so a prune stopped between steps is one that stopped half way.

One server prunes a schedule once per ``prune_every_s``: the one that creates the first record of each
such period (``prune_due``), so the cost is a listing and the deletes, once a period, whatever the number of
servers. Two servers pruning at once is still safe: the floor is raised by compare-and-swap, never
lowered, and each deletes only what is below its own floor.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestra.errors import ConfigurationError
from orchestra.spec.models import ID_PATTERN

if TYPE_CHECKING:
    from croniter import croniter as Croniter

__all__ = [
    "MAX_COUNTED",
    "PRUNE_STEP",
    "Pruning",
    "Schedule",
    "Tick",
    "TickRecord",
    "TickRetention",
    "due",
    "plan",
    "prune",
    "prune_due",
    "tick_key",
]

MAX_COUNTED = 100_000
"""Missed ticks counted one by one at most (past it a missed record says ``count`` is at least this)."""

PRUNE_STEP = 1000
"""The most tick records one step of a prune deletes (a backlog goes in steps, the floor raised before each)."""

SessionChoice = Literal["new", "continue", "none"]
Missed = Literal["skip", "run_once"]


def _croniter() -> type[Croniter]:
    try:
        from croniter import croniter
    except ImportError:
        raise ConfigurationError(
            "schedules need croniter: pip install 'orchestra-agents[schedules]'"
        ) from None
    return croniter


class Schedule(BaseModel):
    """A scheduled run: from the server config's ``schedules:`` or ``POST /api/v1/schedules``."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    id: str = Field(pattern=ID_PATTERN, description="The schedule's id.")
    agent: str = Field(pattern=ID_PATTERN, description="The hosted agent or pipeline each tick runs.")
    cron: str = Field(
        description="A cron expression: five fields (minute first), or six with seconds last (croniter)."
    )
    timezone: str = Field(default="UTC", description="The IANA time zone the expression is read in.")
    input: Any = Field(
        default="", description="Each run's input; {tick} and {date} in a string are the tick's time and day."
    )
    session: SessionChoice = Field(
        default="new",
        description="new: a session per run; continue: every run on session_id; none: no session.",
    )
    session_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="With continue: the session (default: the id)."
    )
    missed: Missed = Field(
        default="skip",
        description="Ticks missed while every server was down: skip them, or run once for all of them.",
    )
    missed_after_s: float = Field(
        default=60.0, gt=0, description="A tick not started this long after its time counts as missed."
    )
    metadata: dict[str, str] = Field(default_factory=dict, description="Given to each run's metadata.")
    paused: bool = Field(default=False, description="A paused schedule's ticks are not run (nor missed).")
    workspace: str | None = Field(
        default=None, pattern=ID_PATTERN, description="Set by the server: the agent's workspace."
    )
    after: str | None = Field(
        default=None,
        description="Set by the server: ticks count from this time on (its creation or its last resume).",
    )
    owner: str | None = Field(
        default=None, description="Set by the server: the user who made it (none for the config's)."
    )
    memory_subject: str | None = Field(
        default=None,
        description="Set by the server: whose memory its runs use (its maker's user; none: the workspace's).",
    )
    source: Literal["config", "api"] = "api"

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not a known IANA time zone (e.g. Europe/Paris, UTC)") from None
        return value

    @model_validator(mode="after")
    def _expression(self) -> Schedule:
        if not _croniter().is_valid(self.cron):
            raise ValueError(f"cron {self.cron!r} is not a valid cron expression")
        if self.session_id is not None and self.session != "continue":
            raise ValueError("session_id goes with session: continue")
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def definition(self) -> dict[str, Any]:
        """What the schedule says (without its state: paused, since when)."""
        return self.model_dump(
            mode="json", exclude={"paused", "after", "workspace", "owner", "memory_subject"}
        )

    def run_session(self, tick: datetime) -> str | None:
        """The session the tick's run goes on."""
        if self.session == "continue":
            return self.session_id or self.id
        if self.session == "new":
            return f"{self.id}-{tick_key(tick)}"
        return None

    def run_input(self, tick: datetime) -> Any:
        """The tick's input: ``{tick}`` and ``{date}`` replaced in a string (no other formatting)."""
        if not isinstance(self.input, str):
            return self.input
        local = tick.astimezone(self.zone)
        return self.input.replace("{tick}", local.isoformat()).replace("{date}", local.date().isoformat())


def tick_key(tick: datetime) -> str:
    """A tick's name in keys: its UTC time, sortable (``20261202T070000Z``)."""
    return tick.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def key_time(key: str) -> datetime:
    """The tick a key names (``tick_key`` read back)."""
    return datetime.strptime(key, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


@functools.lru_cache(maxsize=256)
def _next_after(cron: str, timezone: str, after: datetime) -> datetime:
    following: datetime = _croniter()(cron, after.astimezone(ZoneInfo(timezone))).get_next(datetime)
    return following.astimezone(UTC)


def due(schedule: Schedule, cursor: datetime) -> datetime:
    """The schedule's first tick after ``cursor`` (UTC)."""
    return _next_after(schedule.cron, schedule.timezone, cursor)


@dataclass(frozen=True)
class Tick:
    """The record ``plan`` asks for: the ticks ``first`` to ``last``; ``count`` > 1 only for missed ones."""

    first: datetime
    last: datetime
    count: int
    missed: bool

    @property
    def runs(self) -> bool:
        return not self.missed

    @property
    def key(self) -> str:
        return tick_key(self.first)


def plan(schedule: Schedule, cursor: datetime, now: datetime) -> Tick | None:
    """The next record after ``cursor`` at ``now``, or None when no tick is due yet (see the docstring)."""
    first = due(schedule, cursor)
    if first > now:
        return None
    cutoff = now - timedelta(seconds=schedule.missed_after_s)
    if first >= cutoff:
        return Tick(first, first, 1, missed=False)
    last, count = first, 1
    while count < MAX_COUNTED:
        following = due(schedule, last)
        if following >= cutoff:
            break
        last, count = following, count + 1
    return Tick(first, last, count, missed=True)


class TickRecord(BaseModel):
    """The record of one tick (or of ticks missed together): written create-only, so it decides who runs
    it; ``claimed`` until its run is queued, then ``started`` (``skipped`` for missed ticks not run,
    ``refused`` when the run could not be queued: its session's queue was full, say; ``error`` says)."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = 1
    schedule_id: str
    first: str = Field(description="The tick (the first missed one, for missed ticks).")
    last: str = Field(description="The tick (the last missed one, for missed ticks).")
    count: int = Field(default=1, description="How many ticks it accounts for.")
    missed: bool = Field(default=False, description="Ticks missed while no server ran them.")
    policy: Missed | None = Field(default=None, description="For missed ticks: what was done.")
    status: Literal["claimed", "started", "skipped", "refused"]
    run_id: str | None = Field(default=None, description="The run this record starts (or started).")
    server: str = Field(description="The server that claimed it (or took the claim over).")
    claimed_at: str
    taken_over: int = Field(default=0, description="How many times a gone server's claim was taken over.")
    error: str | None = Field(default=None, description="Why its run was refused (status refused).")

    def as_json(self) -> bytes:
        return self.model_dump_json().encode()


class TickRetention(BaseModel):
    """How many tick records each schedule keeps (the server config's ``schedule_ticks:``)."""

    model_config = ConfigDict(extra="forbid")

    keep: int = Field(default=1000, ge=1, description="The newest records kept per schedule.")
    max_age_days: float | None = Field(
        default=None,
        gt=0,
        description="Records older than this go even among the newest (the newest one always stays).",
    )
    prune_every_s: float = Field(
        default=600, gt=0, description="How often a schedule's records past those are deleted (one server)."
    )


@dataclass(frozen=True)
class Pruning:
    """What ``prune`` decided: the floor to store first (None: it stays), then the records to delete."""

    floor: str | None
    delete: list[str]


def prune(
    keys: Sequence[str],
    opened: Collection[str],
    floor: str | None,
    now: datetime,
    retention: TickRetention,
    limit: int = PRUNE_STEP,
) -> Pruning:
    """Which of a schedule's tick records go in one step of at most ``limit`` deletes (see the module
    docstring for why the floor is safe): the floor is at the cap, and the next step, given the rest of
    ``keys`` and that floor, goes on from there.

    Args:
        keys: its records' tick keys, listed before ``opened`` was.
        opened: the keys of its open claims (``schedule-open/``).
        floor: the stored floor (None: nothing was pruned yet).
        now: the clock, for ``retention.max_age_days``.
        retention: how many stay.
        limit: the most records deleted.
    """
    ordered = sorted(keys)
    start = 0 if floor is None else bisect.bisect_left(ordered, floor)
    if start >= limit:  # leftovers below the floor go first; the floor stays
        return Pruning(None, ordered[:limit])
    oldest = None if retention.max_age_days is None else now - timedelta(days=retention.max_age_days)
    end = start
    # The newest record always stays: it is where the servers' cursors are.
    while end < min(len(ordered) - 1, limit) and ordered[end] not in opened:
        past_keep = end < len(ordered) - retention.keep
        too_old = oldest is not None and key_time(ordered[end]) < oldest
        if not (past_keep or too_old):
            break
        end += 1
    return Pruning(ordered[end] if end > start else None, ordered[:end])


def prune_due(cursor: datetime, tick: Tick, every_s: float) -> bool:
    """Whether the record of ``tick`` (the one after ``cursor``) is the first of a pruning period: its
    maker prunes then, so a schedule is pruned once a period, by one server."""
    return int(cursor.timestamp() // every_s) != int(tick.first.timestamp() // every_s)
