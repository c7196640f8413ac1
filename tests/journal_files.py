"""Reading a scope's journal as files, whichever kind holds a record: a file of its own, or a segment
(one record a line, each starting ``{"seq":``, where the storage appends: local files). Both are
``journal/<seq>.json``. For tests that look at what is stored, not through the journal."""

from __future__ import annotations

import json
from typing import Any

LINE = b'{"seq":'


def is_segment(data: bytes) -> bool:
    return data.startswith(LINE)


def records_in(key: str, data: bytes) -> list[dict[str, Any]]:
    """The records a journal file holds (a segment's seal line and an unfinished last line left out)."""
    if not is_segment(data):
        return [json.loads(data)]
    return [json.loads(line) for line in data.split(b"\n")[:-1] if line.startswith(LINE)]


async def journal_records(storage: Any, journal: str) -> list[dict[str, Any]]:
    """Every record under ``journal`` (a scope's ``.../journal/`` prefix), oldest first."""
    out: list[dict[str, Any]] = []
    for key in await storage.list(journal):
        found = await storage.read(key)
        if found is not None:
            out += records_in(key, found[0])
    return out


def holds_only_tombstones(key: str, data: bytes) -> bool:
    """Whether every record of a journal file is a tombstone holding nothing but its time (a segment's
    lines also carry their number and checksum)."""
    return all(set(record) - {"seq", "crc32"} == {"t", "deleted"} for record in records_in(key, data))


def last_record(data: bytes) -> bytes:
    """The bytes of the newest record a journal file holds (a segment's last record line)."""
    if not is_segment(data):
        return data
    return [line for line in data.split(b"\n")[:-1] if line.startswith(LINE)][-1]


async def record_sizes(storage: Any, journal: str) -> list[int]:
    """How many bytes each record under ``journal`` takes as stored (a file, or a segment's line)."""
    sizes: list[int] = []
    for key in await storage.list(journal):
        found = await storage.read(key)
        if found is None:
            continue
        data = found[0]
        if is_segment(data):
            sizes += [len(line) for line in data.split(b"\n")[:-1] if line.startswith(LINE)]
        else:
            sizes.append(len(data))
    return sizes
