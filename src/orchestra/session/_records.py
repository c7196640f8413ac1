"""Where a scope's journal records are kept: one file per record, or appended to segments.

Record ``N`` is under the key ``journal/<N, 12 digits>.json``, in one of two kinds of file
(``_segment.py`` tells them apart by their first bytes):

- **A record of its own**, created with a create-only write: on every storage that cannot append
  (memory, S3, the databases), and what every orchestra before segments wrote.
- **A segment** holding records ``N``, ``N + 1``, ... one a line, where the storage can append
  (``AppendStorage``: local files). A record is one conditional append: the segment must still have the
  length and the last bytes this journal last saw, which is what a create-only write of the next number
  is for files, so a second writer is refused all the same. A new segment starts after the last one was
  sealed (a compaction rolls over, so that a fold deletes whole segments) and is created by its first
  append, which only one writer can make.

A scope may hold both: records written before segments (the frozen corpus) load as they are, and the
next record starts a segment. Since both kinds of writer create the same key for the same record, a
writer that cannot append and one that can never both store record ``N``; a segment another process
started is continued by a storage without appends through a compare-and-swap rewrite.

``RecordStore.add`` is a save's commit point (``_commit.py``): this module knows where a record goes,
the journal (``_journal.py``) what goes in it.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from orchestra._json import dumps
from orchestra._logging import get_logger
from orchestra.errors import SnapshotError, StorageConflictError
from orchestra.session._commit import write_outcome
from orchestra.session._document import decode_messages, is_message_log
from orchestra.session._layout import ScopeLayout
from orchestra.session._segment import (
    TAIL,
    Segment,
    is_segment,
    line_of,
    parse_segment,
    rebuilt,
    record_name,
    seal_line,
)
from orchestra.session.snapshot import CHECKSUM, Record, decode_model, seal, unseal
from orchestra.storage import ABSENT, Storage, appendable, read_many, write_many

__all__ = ["Read", "RecordStore", "Vanished"]

log = get_logger("orchestra.session")

_RESTORE = "Nothing was loaded; restore the session from an export or an immutable snapshot"


class Read(NamedTuple):
    """A journal record as read: its number, content, size in bytes and name (its key; in a segment,
    the key and the record's number)."""

    seq: int
    record: Record
    size: int
    key: str


class Vanished(SnapshotError):
    """A record a load was reading is gone: a fold deleted it meanwhile, or the session is damaged."""


@dataclass
class _End:
    """The newest segment, as this journal last read or wrote it: where the next record is appended."""

    key: str
    first: int
    count: int  # its records
    at: int  # the length of its whole lines
    tail: bytes  # their last bytes
    sealed: bool
    torn: bool  # a killed writer's unfinished line follows them: cut it off before appending

    @classmethod
    def of(cls, segment: Segment) -> _End:
        return cls(
            segment.key,
            segment.first,
            len(segment.lines),
            segment.end,
            segment.tail,
            segment.sealed,
            bool(segment.torn),
        )

    def grew(self, line: bytes, *, sealed: bool = False) -> None:
        self.at += len(line)
        self.tail = (self.tail + line)[-TAIL:]
        self.count += 0 if sealed else 1
        self.sealed = sealed
        self.torn = False


def _decode(data: bytes, name: str) -> Record:
    record = decode_model(Record, data, name)
    for log_name, op in record.logs.items():
        if is_message_log(log_name):
            op.add = decode_messages(op.add, name, checked=record.checksummed)
    return record


def _reads(segment: Segment, first: int) -> list[Read]:
    """A segment's records from number ``first`` on, each numbered by its own line (a missing line makes
    the numbers jump, which a load refuses)."""
    reads = []
    for position, line in enumerate(segment.lines, start=segment.first):
        record = _decode(line, record_name(segment.key, position))
        if record.seq is None or (position == segment.first and record.seq != position):
            raise SnapshotError(
                f"{record_name(segment.key, position)}: damaged: its line holds record {record.seq}. {_RESTORE}"
            )
        if record.seq >= first:
            reads.append(Read(record.seq, record, len(line) + 1, record_name(segment.key, record.seq)))
    return reads


class RecordStore:
    """The records of one scope: reading them, adding one (the commit point), and what the journal's
    housekeeping does to them (sealing, folding, tombstones, redaction)."""

    def __init__(self, storage: Storage, layout: ScopeLayout) -> None:
        self.storage = storage
        self.layout = layout
        self.appender = appendable(storage)
        self.end: _End | None = None  # the newest segment (None: none, or the newest record is a file)
        self._attempt: tuple[str, int, bytes] | None = None  # an append whose outcome is not known yet

    # -- reading --------------------------------------------------------------------------------------

    async def keys(self, *, start_after: str | None = None) -> list[str]:
        listed = await self.storage.list(self.layout.journal, start_after=start_after)
        return [key for key in listed if key.endswith(".json")]

    async def any(self) -> bool:
        return bool(await self.keys())

    def parse(self, key: str, data: bytes, *, newest: bool, first: int = 0) -> list[Read]:
        """The records a journal file holds, from number ``first`` on (``newest``: it is the journal's
        newest file, the only one that may end in a killed writer's unfinished record)."""
        seq = self.layout.seq_of(key)
        if not is_segment(data):  # (decoded even when not wanted: a damaged segment may look like one)
            read = Read(seq, _decode(data, key), len(data), key)
            return [read] if seq >= first else []
        segment = parse_segment(key, seq, data)
        if segment.torn and not newest:
            raise SnapshotError(
                f"{record_name(key, segment.next_seq)}: damaged: the segment is cut short in the middle of a "
                "record, and later files follow it (only the newest segment can end in a killed writer's "
                f"unfinished record). {_RESTORE}"
            )
        return _reads(segment, first)

    def _track(self, key: str | None, data: bytes) -> None:
        """Note the journal's newest file as where the next record goes (a load)."""
        if key is None or not is_segment(data):
            self.end = None
            return
        segment = parse_segment(key, self.layout.seq_of(key), data)
        self.end = _End.of(segment)
        if segment.torn:
            log.warning(
                "journal_unfinished_record_dropped",
                key=key,
                record=segment.next_seq,
                bytes=len(segment.torn),
                why="a writer killed in the middle of an append left it (never acknowledged); the next "
                "save cuts it off",
            )

    async def _covering(self, first: int) -> list[str]:
        """The journal's keys from the one that may hold record ``first`` on (a segment that starts
        before it; a record file before it, which ``parse`` leaves out)."""
        if self.appender is None and first > 0:
            # Record files, as a rule: list from record ``first`` on (a long journal is not listed whole).
            keys = await self.keys(start_after=self.layout.record(first - 1))
            if keys and self.layout.seq_of(keys[0]) == first:
                return keys
        keys = await self.keys()
        index = bisect.bisect_right([self.layout.seq_of(key) for key in keys], first) - 1
        return keys[max(index, 0) :]

    async def read(
        self, after: int, until: int | None = None, *, with_after: bool = False, track: bool = False
    ) -> list[Read]:
        """The records after ``after`` (up to ``until``), in order, checked to have no gap. With
        ``with_after``, record ``after`` itself comes first if it is still there (a snapshot's own record,
        read to check that the two agree). With ``track`` (a load), the newest segment is noted as where
        the next record goes."""
        first = after if with_after and after >= 0 else after + 1
        keys = await self._covering(first)
        newest = keys[-1] if keys else None
        if until is not None:
            keys = [key for key in keys if self.layout.seq_of(key) <= until]
        records: list[Read] = []
        for key, found in zip(keys, await read_many(self.storage, keys), strict=True):
            if found is None:
                raise Vanished(
                    f"{key}: journal record vanished while loading; another process is deleting it"
                )
            records += self.parse(key, found[0], newest=key == newest, first=first)
            if track and key == newest:
                self._track(key, found[0])
        if track and newest is None:
            self._track(None, b"")
        if until is not None:
            records = [read for read in records if read.seq <= until]
        expected = after + 1
        for read in records:
            if read.seq == after and with_after:
                continue
            if read.seq != expected and not read.record.deleted:  # (before a tombstone: all deleted)
                raise Vanished(
                    f"{self.layout.record(expected)}: journal record missing ({self.layout.describe()} jumps "
                    f"from record {expected - 1} to {read.seq}); the session was damaged or deleted while "
                    "in use"
                )
            expected = read.seq + 1
        return records

    async def read_new(self, seq: int) -> list[Read]:
        """The records after ``seq``, the newest this journal read: where that is in a segment, only the
        bytes appended to it since are read (a reader that follows a scope another process writes)."""
        end = self.end
        if end is None or end.sealed or end.torn or end.first + end.count != seq + 1:
            return await self.read(seq, track=True)
        data = await self._read_from(end.key, end.at - len(end.tail))
        if data is None or not data.startswith(end.tail):
            raise Vanished(f"{end.key}: rewritten or deleted while it was being followed")
        added = data[len(end.tail) :]
        new = parse_segment(end.key, seq + 1, added)
        reads = _reads(new, seq + 1)
        end.count += len(new.lines)
        end.at += new.end
        end.tail = (end.tail + added[: new.end])[-TAIL:]
        end.sealed, end.torn = new.sealed, bool(new.torn)
        if new.sealed:  # it rolled over: the records go on in the next segment
            reads += await self.read(seq + len(reads), track=True)
        return reads

    async def record(self, seq: int) -> Read | None:
        """Record ``seq``, or None if it is not there."""
        keys = await self._covering(seq)
        if not keys or self.layout.seq_of(keys[0]) > seq:
            return None
        found = await self.storage.read(keys[0])
        if found is None:
            return None
        reads = self.parse(keys[0], found[0], newest=True, first=seq)
        return reads[0] if reads and reads[0].seq == seq else None

    async def newest(self, keys: Sequence[str] | None = None) -> Read | None:
        """The newest record (``keys``: the journal's keys, if the caller listed them)."""
        keys = list(keys) if keys is not None else await self.keys()
        for index in range(len(keys) - 1, -1, -1):
            found = await self.storage.read(keys[index])
            if found is not None:
                reads = self.parse(keys[index], found[0], newest=index == len(keys) - 1)
                if reads:
                    return reads[-1]
        return None

    async def oldest(self) -> Read | None:
        """The oldest record still kept."""
        keys = await self.keys()
        for index, key in enumerate(keys):
            found = await self.storage.read(key)
            if found is not None:
                reads = self.parse(key, found[0], newest=index == len(keys) - 1)
                if reads:
                    return reads[0]
        return None

    async def _read_from(self, key: str, offset: int) -> bytes | None:
        if self.appender is not None:
            return await self.appender.read_from(key, offset)
        found = await self.storage.read(key)
        return None if found is None else found[0][offset:]

    async def is_newest(self, seq: int, last_t: int | None, *, idle: bool) -> bool:
        """Whether record ``seq`` is still the newest: nothing follows it (another writer's record, a
        delete's tombstone, a seal) and, for a record file once ``idle``, it is the one written."""
        end = self.end
        if end is not None and not end.sealed:
            there = await self._read_from(end.key, end.at - len(end.tail))
            if there is None or not there.startswith(end.tail):
                return False  # rewritten (a delete) or gone (folded)
            return b"\n" not in there[len(end.tail) :]  # nothing, or a killed writer's unfinished line
        if end is not None:  # sealed: the seal is still its end, and nothing follows it
            there = await self._read_from(end.key, end.at - len(end.tail))
            return there == end.tail and await self.storage.read(self.layout.record(seq + 1)) is None
        keys = [self.layout.record(seq + 1)]
        if idle and seq >= 0:
            keys.append(self.layout.record(seq))
        found = await read_many(self.storage, keys)
        if found[0] is not None:
            return False
        if idle and seq >= 0:
            own = found[1]
            if own is None:
                return False
            record = decode_model(Record, own[0], keys[1])
            if record.deleted or (last_t is not None and record.t != last_t):
                return False
        return True

    # -- adding a record: the commit point -------------------------------------------------------------

    def _place(self, seq: int) -> tuple[str, int, bytes] | None:
        """Where record ``seq`` goes: ``(segment, at, tail)`` (``at`` 0: a new one), or None for a file of
        its own."""
        end = self.end
        if end is not None and not end.sealed:
            return end.key, end.at, end.tail
        if self.appender is None:
            return None
        return self.layout.record(seq), 0, b""

    def key_of(self, seq: int) -> str:
        """The key record ``seq`` is written to."""
        place = self._place(seq)
        return self.layout.record(seq) if place is None else place[0]

    def starts_file(self, seq: int) -> bool:
        """Whether record ``seq`` starts a file of its own (a record file or a new segment): nothing in
        its write says that the record before it is still the newest, as an append's condition does."""
        place = self._place(seq)
        return place is None or place[1] == 0

    def encode(self, seq: int, body: bytes) -> bytes:
        """Record ``seq`` as it is stored: ``body`` (its JSON object) sealed, as a file of its own or as
        its line in a segment (numbered; the newline is added when it is appended)."""
        return seal(body) if self._place(seq) is None else line_of(seq, body)

    async def add(self, seq: int, data: bytes) -> None:
        """Store record ``seq`` (``data`` from ``encode``): the commit point. Raises
        ``StorageConflictError`` when its place is taken (another writer's record, a tombstone, a seal),
        and what the storage raised otherwise (``outcome`` then says whether it was stored)."""
        place = self._place(seq)
        if place is None:
            self._attempt = None
            await self.storage.write(self.layout.record(seq), data, expect=ABSENT)
            return
        if self.end is not None and self.end.torn:
            await self._cut_torn(self.end)
        key, at, tail = place
        line = data + b"\n"
        self._attempt = (key, at, line)
        await self._append(key, line, at, tail)
        self._appended(seq, key, at, line)

    def _appended(self, seq: int, key: str, at: int, line: bytes) -> None:
        self._attempt = None
        if at == 0:
            self.end = _End(key, seq, 1, len(line), line[-TAIL:], sealed=False, torn=False)
        else:
            assert self.end is not None
            self.end.grew(line)

    async def _append(self, key: str, line: bytes, at: int, tail: bytes) -> None:
        if self.appender is not None:
            await self.appender.append(key, line, at=at, tail=tail)
            return
        # A storage without appends continues a segment another process started by rewriting it whole
        # (compare-and-swap), rather than writing files beside it that an appending writer would miss.
        found = await self.storage.read(key)
        if found is None:
            raise StorageConflictError(f"cannot append to {key!r}: it does not exist")
        data, version = found
        if len(data) != at or not data.endswith(tail):
            raise StorageConflictError(f"cannot append to {key!r}: it changed since it was read")
        await self.storage.write(key, data + line, expect=version)

    async def _cut_torn(self, end: _End) -> None:
        """Cut off the unfinished line a killed writer left at the end of the newest segment (never
        acknowledged: an append is acknowledged once its whole line is synced), before appending."""
        found = await self.storage.read(end.key)
        if found is None:
            raise StorageConflictError(f"cannot append to {end.key!r}: it does not exist")
        data, version = found
        segment = parse_segment(end.key, end.first, data)
        if (segment.end, segment.tail, len(segment.lines)) != (end.at, end.tail, end.count):
            raise StorageConflictError(f"cannot append to {end.key!r}: another writer appended to it")
        if segment.torn:  # (logged when the load found it)
            await self.storage.write(end.key, data[: end.at], expect=version)
        end.torn = False

    async def outcome(self, seq: int, data: bytes, exc: Exception) -> bool | None:
        """Whether record ``seq``'s write that raised ``exc`` was made (None: not known)."""
        if self._attempt is None:
            return await write_outcome(self.storage, self.layout.record(seq), data, exc)
        key, at, line = self._attempt
        stored = await write_outcome(self.storage, key, data, exc, look=lambda: self._look(seq))
        if stored and self._attempt is not None:  # the storage said so, without a read back
            self._appended(seq, key, at, line)
        return stored

    async def _look(self, seq: int) -> bool | None:
        try:
            return await self.settle(seq, b"") == "ours"
        except Exception:  # a StorageError, or whatever a storage users wrote raises: not known
            return None

    async def settle(self, seq: int, data: bytes) -> Literal["ours", "absent", "theirs"]:
        """What is at record ``seq`` after a write of ``data`` whose outcome was not known: it, nothing,
        or another writer's record. Raises what the storage raises when it cannot be read."""
        if self._attempt is None:
            found = await self.storage.read(self.layout.record(seq))
            return "absent" if found is None else "ours" if found[0] == data else "theirs"
        key, at, line = self._attempt
        there = await self._read_from(key, at)
        if there is not None and there.startswith(line):
            self._appended(seq, key, at, line)
            return "ours"
        self._attempt = None
        if not there:
            return "absent"
        if line.startswith(there):  # the start of ours: cut off before the next append
            if at == 0:
                self.end = _End(key, seq, 0, 0, b"", sealed=False, torn=True)
            elif self.end is not None:
                self.end.torn = True
            return "absent"
        return "theirs"

    # -- housekeeping ----------------------------------------------------------------------------------

    async def seal(self) -> bool:
        """Close the newest segment (after a compaction), so that the next record starts a new one and a
        fold can delete this one whole. False when there is nothing to seal."""
        end = self.end
        if self.appender is None or end is None or end.sealed or end.torn or not end.count:
            return False
        line = seal_line()
        await self.appender.append(end.key, line, at=end.at, tail=end.tail)
        end.grew(line, sealed=True)
        return True

    async def folded_keys(self, folded_to: int) -> list[str]:
        """The keys whose every record is at or before ``folded_to`` (never the newest, which holds the
        newest record): a file's records end where the next file's begin."""
        keys = await self.keys()
        return [key for key, after in itertools.pairwise(keys) if self.layout.seq_of(after) - 1 <= folded_to]

    # -- deleting the scope ----------------------------------------------------------------------------

    async def place_tombstone(
        self, tombstone: bytes, snapshot_seq: Callable[[], Awaitable[int]]
    ) -> tuple[bool, int] | None:
        """Put a tombstone (``tombstone``: a record's JSON object) at the next record number
        (``snapshot_seq``: the snapshot's record, for a scope without records). Returns whether the scope
        was live and the tombstone's number, or None when a writer appended meanwhile (try again)."""
        keys = await self.keys()
        if not keys:
            newest = await snapshot_seq()
        else:
            key = keys[-1]
            found = await self.storage.read(key)
            if found is None:
                return None  # folded meanwhile
            reads = self.parse(key, found[0], newest=True)
            if reads and reads[-1].record.deleted:
                return False, reads[-1].seq  # deleted before (the caller finishes that delete)
            newest = reads[-1].seq if reads else self.layout.seq_of(key) - 1
            if is_segment(found[0]) and not parse_segment(key, self.layout.seq_of(key), found[0]).sealed:
                # One compare-and-swap: every record a tombstone, and one more at the next number.
                first = self.layout.seq_of(key)
                lines = [line_of(n, tombstone) + b"\n" for n in range(first, newest + 2)]
                try:
                    await self.storage.write(key, b"".join(lines), expect=found[1])
                except StorageConflictError:
                    return None
                self.end = None
                return True, newest + 1
        try:
            if self.appender is not None:
                await self.appender.append(
                    self.layout.record(newest + 1), line_of(newest + 1, tombstone) + b"\n", at=0
                )
            else:
                await self.storage.write(self.layout.record(newest + 1), tombstone, expect=ABSENT)
        except StorageConflictError:
            return None
        self.end = None
        return True, newest + 1

    async def overwrite_before(self, seq: int, tombstone: bytes) -> int:
        """Overwrite every record before ``seq`` with a tombstone, keeping their numbers: a writer that
        fell behind meets a tombstone at its next number too. Returns how many files were rewritten."""
        keys = [key for key in await self.keys() if self.layout.seq_of(key) < seq]
        writes = []
        for key, found in zip(keys, await read_many(self.storage, keys), strict=True):
            if found is None:
                continue
            if not is_segment(found[0]):
                writes.append((key, tombstone))
                continue
            first = self.layout.seq_of(key)
            try:
                segment = parse_segment(key, first, found[0])
                count = len(segment.lines)
            except SnapshotError:  # damaged: a tombstone for each of its lines all the same
                segment, count = Segment(key, first), found[0].count(b"\n")
            if first + count > seq:
                continue  # the segment the tombstone went into: in place already
            writes.append(
                (key, rebuilt(segment, [line_of(n, tombstone) for n in range(first, first + count)]))
            )
        await write_many(self.storage, writes)
        return len(writes)

    # -- redaction -------------------------------------------------------------------------------------

    async def redact(self, scrub: Callable[[dict[str, Any]], bool]) -> int:
        """Rewrite every record ``scrub`` changes (it changes a record's JSON in place and says whether
        it did), compare-and-swap, reading again when a writer appended meanwhile. Returns the files
        rewritten."""
        rewritten = 0
        for key in await self.keys():
            for _ in range(3):
                found = await self.storage.read(key)
                if found is None:
                    break
                data, version = found
                if not is_segment(data):
                    new = _scrubbed(data, key, scrub)
                else:
                    segment = parse_segment(key, self.layout.seq_of(key), data)
                    lines = [
                        _scrubbed(line, record_name(key, n), scrub) or line
                        for n, line in enumerate(segment.lines, start=segment.first)
                    ]
                    new = rebuilt(segment, lines) if lines != segment.lines else None
                if new is None:
                    break
                try:
                    await self.storage.write(key, new, expect=version)
                except StorageConflictError:
                    continue  # appended or rewritten meanwhile: read it again
                if self.end is not None and self.end.key == key:
                    self.end = _End.of(parse_segment(key, self.end.first, new))
                rewritten += 1
                break
        return rewritten


def _scrubbed(data: bytes, name: str, scrub: Callable[[dict[str, Any]], bool]) -> bytes | None:
    """A record's bytes after ``scrub``, sealed again (its members in the same order, a segment's line
    number first); None if it changed nothing."""
    unseal(data, name)  # a damaged record is not rewritten (its new checksum would hide the damage)
    document = json.loads(data)
    document.pop(CHECKSUM, None)
    if not scrub(document):
        return None
    return seal(dumps(document).encode())
