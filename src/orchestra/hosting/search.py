"""Search of runs and sessions: filters, time order, pages with an opaque cursor (issue 37 item 5).

Works the same on every storage, by prefix listings and reads (what each costs is in docs/server.md,
"Searching runs and sessions"):

- runs: a listing of the run keys of the agents asked for (``runs/<agent>/<session>/<run_id>.json``: one
  listing of N keys, or of one session's). Run ids are UUIDv7, so a run's start time and the order come
  from its key: the time range and the cursor cost no read. Records are then read newest (or oldest)
  first, a page at a time, and kept if they match status and metadata: an unfiltered page reads ``limit``
  records; a filtered one reads until ``limit`` match (or the keys run out).
- sessions: the agents' sessions as ``orchestra.session.admin`` lists them (a deleted one is not), each
  described by its latest run (found in the same key listing): its status and metadata, read only when
  a filter asks for them or for the page.

The cursor is the sort key of the last item answered (a run id; a session's time, agent and id): a page
starts after it, so paging sees no item twice even while new runs start (they sort before a
newest-first cursor). Any text is a place in that order, so no cursor is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from orchestra.hosting.reader import RunReader
from orchestra.hosting.records import RunRecord
from orchestra.hosting.sessions import Sessions
from orchestra.hosting.workspaces import Workspaces

__all__ = [
    "Finder",
    "Query",
    "SessionHit",
    "decode_cursor",
    "encode_cursor",
    "parse_metadata",
    "run_time",
    "search",
]

Order = Literal["newest", "oldest"]


@dataclass(frozen=True)
class Query:
    """What a search asks for; every filter given must match."""

    statuses: frozenset[str] = frozenset()
    since: datetime | None = None
    until: datetime | None = None
    metadata: dict[str, str | None] = field(default_factory=dict)
    limit: int = 100
    order: Order = "newest"
    cursor: str | None = None

    def matches(self, record: RunRecord | None) -> bool:
        """Whether a run (a session's latest run) passes the status and metadata filters."""
        if record is None:
            return not self.statuses and not self.metadata
        if self.statuses and record.status not in self.statuses:
            return False
        return all(
            (k in record.metadata) if v is None else record.metadata.get(k) == v
            for k, v in self.metadata.items()
        )

    @property
    def reads_records(self) -> bool:
        return bool(self.statuses or self.metadata)

    def in_range(self, when: datetime | None) -> bool:
        if when is None:
            return self.since is None and self.until is None
        return (self.since is None or when >= self.since) and (self.until is None or when < self.until)


def parse_metadata(pairs: Sequence[str]) -> dict[str, str | None]:
    """``key:value`` pairs (a query's ``metadata=``) as a dict; a bare ``key`` asks only that the key be
    there (``None``)."""
    out: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition(":")
        out[key] = value if sep else None
    return out


def utc(when: datetime | None, *, edge: datetime | None = None) -> datetime | None:
    """A time as UTC (a time without a zone is taken as UTC; one that UTC cannot hold, at the calendar's
    edge, is ``edge``)."""
    if when is None:
        return None
    try:
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except OverflowError:
        return edge


def run_time(run_id: str) -> datetime | None:
    """When a run started, from its UUIDv7 id (None for an id that is not one)."""
    try:
        value = uuid.UUID(run_id)
    except ValueError:
        return None
    if value.version != 7:
        return None
    ms = value.int >> 80
    return datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)


_SEP = "|"


def encode_cursor(key: Sequence[str]) -> str:
    """The cursor of a place in the order: its sort key (opaque to callers; any text is a place)."""
    return _SEP.join(key)


def decode_cursor(cursor: str, parts: int) -> tuple[str, ...]:
    """The sort key a cursor names (a text this server did not give is still a place in the order)."""
    key = cursor.split(_SEP, parts - 1)
    return tuple(key + [""] * (parts - len(key)))


async def search(
    items: Sequence[tuple[tuple[str, ...], Any]],
    query: Query,
    read: Callable[[list[Any]], Awaitable[list[RunRecord | None]]],
) -> tuple[list[tuple[Any, RunRecord | None]], str | None]:
    """One page: ``items`` are (sort key, item) already in the time range; ``read`` gives the run of each
    item (only called when the filters or the page need it). Answers the page and the next cursor."""
    parts = len(items[0][0]) if items else 1
    after = decode_cursor(query.cursor, parts) if query.cursor else None
    newest = query.order == "newest"
    ordered = sorted(items, key=lambda i: i[0], reverse=newest)
    if after is not None:
        ordered = [i for i in ordered if (i[0] < after if newest else i[0] > after)]
    page: list[tuple[Any, RunRecord | None]] = []
    last: tuple[str, ...] | None = None
    start = 0
    while start < len(ordered) and len(page) < query.limit:
        # Unfiltered: exactly the page. Filtered: a page's worth at a time (at least 20 reads per round).
        size = query.limit - len(page) if not query.reads_records else max(query.limit, 20)
        chunk = ordered[start : start + size]
        start += len(chunk)
        records = await read([item for _, item in chunk])
        for (key, item), record in zip(chunk, records, strict=True):
            if query.matches(record):
                page.append((item, record))
                last = key
                if len(page) == query.limit:
                    break
            else:
                last = key
    more = len(page) == query.limit and (
        last is not None and any((i[0] < last if newest else i[0] > last) for i in ordered[-1:])
    )
    return page, encode_cursor(last) if more and last is not None else None


@dataclass(frozen=True)
class SessionHit:
    """A session in a search answer: its agent, when it was last saved, and its latest run (if any)."""

    agent_id: str
    session_id: str
    updated_at: datetime | None
    last_run: RunRecord | None


class Finder:
    """Searches of one server's workspaces (see the module docstring)."""

    def __init__(self, workspaces: Workspaces, reader: RunReader, sessions: Sessions) -> None:
        self.workspaces = workspaces
        self.reader = reader
        self.sessions = sessions

    async def runs(
        self, workspace: str, agent_ids: list[str], session_id: str | None, query: Query
    ) -> tuple[list[RunRecord], str | None]:
        """A page of runs (settled like ``RunReader.run_record``) and the cursor of the next one."""
        store = self.workspaces.runs(workspace)
        items = []
        for key in await store.keys(agent_ids, session_id):
            run_id = store.run_id_of(key)
            if query.in_range(run_time(run_id)):
                items.append(((run_id,), key))

        async def read(keys: list[Any]) -> list[RunRecord | None]:
            return await self.reader.settled(workspace, await store.read_keys(keys))

        page, cursor = await search(items, query, read)
        return [record for _, record in page if record is not None], cursor

    async def sessions_of(
        self, workspace: str, agent_ids: list[str], query: Query
    ) -> tuple[list[SessionHit], str | None]:
        """A page of sessions, latest saved first (or oldest), and the cursor of the next one."""
        store = self.workspaces.runs(workspace)
        latest: dict[tuple[str, str], str] = {}  # (agent, session) -> its latest run's key
        for key in await store.keys(agent_ids):
            agent_id, session = key.split("/")[1], store.session_of(key)
            if session is not None:
                mark = (agent_id, session)
                if mark not in latest or store.run_id_of(key) > store.run_id_of(latest[mark]):
                    latest[mark] = key
        items = []
        for agent_id in agent_ids:
            for summary in await self.sessions.summaries(workspace, agent_id):
                run_key = latest.get((agent_id, summary.session_id))
                when = summary.updated_at or (run_time(store.run_id_of(run_key)) if run_key else None)
                when = utc(when)
                if query.in_range(when):
                    sort = (when.isoformat() if when else "", agent_id, summary.session_id)
                    items.append((sort, (agent_id, summary.session_id, when, run_key)))

        async def read(found: list[Any]) -> list[RunRecord | None]:
            keys = [run_key for *_, run_key in found if run_key is not None]
            records = dict(
                zip(keys, await self.reader.settled(workspace, await store.read_keys(keys)), strict=True)
            )
            return [records.get(run_key) if run_key else None for *_, run_key in found]

        page, cursor = await search(items, query, read)
        hits = [SessionHit(agent_id, sid, when, record) for (agent_id, sid, when, _), record in page]
        return hits, cursor
