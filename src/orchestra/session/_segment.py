"""A journal segment: records of one scope appended to one file, one per line. No I/O.

Where the storage can append (``orchestra.storage.AppendStorage``: local files), a scope's records go to
segments instead of one file each, so that a durable record costs one ``fdatasync`` instead of a file's
sync and its folder's. A segment has the name its first record's file would have,
``journal/<first>.json``: a writer that appends and one that cannot (it writes a record as a file of its
own) create the same key for the same record, so only one of them can. What a file holds says which it
is: each line of a segment is a record as a record file holds it (sealed: it ends with its CRC-32) with
its number put first, ``{"seq":N,"t":...}``, then ``\\n``; a record file starts with ``{"t":``.

- **Sealed.** When the journal rolls over to a new segment (after a compaction, so that a fold deletes
  whole segments), it appends a *seal* line, ``{"sealed":true,"t":...}``, first: a writer that is behind
  and appends to the old segment is refused (its length changed), and a writer that is current and sees
  the seal starts the next segment, which only one of two can create.
- **A torn tail.** A process killed in the middle of an append leaves the start of a line without its
  ``\\n``. An append is acknowledged only after the whole line is written and synced, so those bytes were
  never acknowledged: at the end of the newest segment they are dropped (the next writer cuts them off
  before appending, and logs it). A record cut short at the end of the newest segment looks the same,
  so damage there cannot be told from a killed writer; anywhere else it is refused, naming the file and
  the record: a line whose checksum fails, a line after a seal, a complete record whose ``\\n`` changed,
  bytes cut off a segment that is not the newest, a missing line (the numbers jump).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from orchestra.errors import SnapshotError
from orchestra.session.snapshot import seal, unseal

__all__ = ["TAIL", "Segment", "is_segment", "line_of", "parse_segment", "rebuilt", "record_name", "seal_line"]

TAIL = 24
"""How many of a segment's last bytes an append expects to find (``AppendStorage.append``'s ``tail``):
the last line's checksum and more, so a rewritten segment of the same length still refuses it."""

_LINE = b'{"seq":'
_SEAL = b'{"sealed":true'
_RESTORE = "Nothing was loaded; restore the session from an export or an immutable snapshot"


def is_segment(data: bytes) -> bool:
    """Whether a journal file is a segment (or what a killed writer left of a new one's first line)."""
    return data.startswith(_LINE) or _LINE.startswith(data)


def line_of(seq: int, body: bytes) -> bytes:
    """Record ``seq``'s line in a segment (without its newline): ``body``, a record's JSON object, with
    its number put first, sealed."""
    return seal(b'{"seq":%d,%s' % (seq, body[1:]))


def seal_line() -> bytes:
    """The line that closes a segment (its time makes each seal's bytes its own)."""
    return seal(b'{"sealed":true,"t":%d}' % (time.time_ns() // 1_000_000)) + b"\n"


def record_name(key: str, seq: int) -> str:
    """How errors name a record inside a segment."""
    return f"{key} (record {seq})"


@dataclass
class Segment:
    """A segment as read: its records' lines (without the newline), its seal line if it has one, where its
    whole lines end, their last bytes, and what follows them (a killed writer's unfinished append)."""

    key: str
    first: int
    lines: list[bytes] = field(default_factory=list)
    seal: bytes = b""
    end: int = 0
    tail: bytes = b""  # the last TAIL bytes of the whole lines: what an append after them expects
    torn: bytes = b""

    @property
    def sealed(self) -> bool:
        return bool(self.seal)

    @property
    def next_seq(self) -> int:
        return self.first + len(self.lines)


def _whole(candidate: bytes) -> bool:
    """Whether ``candidate`` is a complete sealed line (a record or a seal)."""
    try:
        return candidate.startswith(b"{") and unseal(candidate, "")
    except SnapshotError:
        return False


def parse_segment(key: str, first: int, data: bytes) -> Segment:
    """Split a segment into its lines, checking each one's checksum (a line's number is checked when the
    record is decoded: ``_records.py``).

    Raises:
        SnapshotError: a line is damaged (naming the file and the record), or follows a seal.
    """
    segment = Segment(key, first)
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a killed writer's unfinished line
    position = 0
    for line in lines:
        name = record_name(key, segment.next_seq)
        if segment.sealed:
            raise SnapshotError(
                f"{name}: damaged: a line follows the segment's seal, which only a writer that ignored the "
                f"seal could have written. {_RESTORE}"
            )
        if not unseal(line, name):  # raises when the checksum does not match
            raise SnapshotError(f"{name}: damaged: the line has no checksum (every line has one). {_RESTORE}")
        if line.startswith(_SEAL):
            segment.seal = line + b"\n"
        elif line.startswith(_LINE):
            segment.lines.append(line)
        else:
            raise SnapshotError(f"{name}: damaged: the line is not a record of the segment. {_RESTORE}")
        position += len(line) + 1
    if torn and _whole(torn[:-1]):
        raise SnapshotError(
            f"{record_name(key, segment.next_seq)}: damaged: a whole record ends in {torn[-1:]!r} where its "
            f"line ends in a newline. {_RESTORE}"
        )
    segment.end = position
    segment.tail = data[max(0, position - TAIL) : position]
    segment.torn = torn
    return segment


def rebuilt(segment: Segment, lines: list[bytes]) -> bytes:
    """``segment`` with ``lines`` for its records (a redaction, tombstones): its seal and any unfinished
    line kept as they are."""
    return b"".join(line + b"\n" for line in lines) + segment.seal + segment.torn
