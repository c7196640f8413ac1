"""The journal of one scope: incremental, conditional saves of a document of fields and logs.

A scope's state is a *document* (``_document.py``): named JSON fields (an agent's state, a node's result)
and named logs (append-mostly lists: a conversation, an execution order). A save writes one journal record holding only
what changed since the previous save: the fields whose JSON differs and, per log, the items added (plus
how many were dropped from the front or replaced at the end). Logs are compared by object identity,
which costs a pointer comparison per item: the history is never re-serialized to find what changed.

Every record is created with ``expect=ABSENT`` under the next sequence number, so two live writers of
one scope cannot both append: the one that is behind gets ``SessionConflictError``. Now and then (when
the records since the last compaction outweigh the compacted snapshot several times over) the whole
document is written to ``snapshot_latest.json`` with a compare-and-swap; loading reads that snapshot and
replays the records after it. An immutable snapshot is just "the state after record N" and shares every
byte with the journal.

Records are deleted by *folding* (``fold``): once they are in ``snapshot_latest.json``, older than
``Compaction.delete_after`` and older than every immutable snapshot, they are replayed into
``snapshot_base.json`` (the state after the last of them) and deleted. The newest record is never deleted.
Deleting records must not let a writer that fell behind append silently where a record used to be, so a
writer idle for more than half of ``delete_after`` first checks that its own last record is still there
(records are folded only up to the one before the newest: if its record is gone, someone wrote after it,
or the scope was deleted), and is refused otherwise. A record can only be deleted
``delete_after`` after it was written, so a writer that saved more recently than that cannot have been
overtaken by a deleted record.

Deleting a scope (``erase``) must reach every writer that keeps it in memory, however recently it saved,
before that writer writes again: a deleted conversation is never written on. So a delete first creates a
*tombstone* record at the next number (create-only: it and a writer's next record cannot both be made),
then overwrites every record still in the journal with a tombstone and deletes the scope's other files.
A writer at any record number then meets a tombstone at its next one, and a writer kept between uses
checks that number before it relies on what it holds (``is_newest``: one small read). A load starts after
the last tombstone; a scope whose newest record is one is absent, and is created again after it (the
records before it are folded away like any others), so a deleted id can be used again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestra._concurrency import map_concurrently
from orchestra._json import dumps
from orchestra.errors import (
    SessionConflictError,
    SnapshotError,
    StorageConflictError,
    StorageError,
    StorageOutcomeUnknownError,
)
from orchestra.session._commit import housekeeping
from orchestra.session._document import Document, decode_messages, diff_log, is_message_log, op_json
from orchestra.session._layout import ScopeLayout
from orchestra.session._records import Read, RecordStore, Vanished
from orchestra.session.snapshot import (
    CHECKSUM,
    JournalInfo,
    LogOp,
    Record,
    Snapshot,
    SnapshotManifest,
    decode_model,
    encode_model,
    encode_snapshot,
    seal,
    unseal,
)
from orchestra.storage import ABSENT, Storage, delete_many, read_many

__all__ = ["Compaction", "Journal", "writers_delete_after"]


@dataclass(frozen=True)
class Compaction:
    """When to fold the journal into ``snapshot_latest.json``.

    Compaction happens when the records written since the last one exceed both ``min_bytes`` and
    ``ratio`` times the size of the compacted snapshot, or when there are ``max_records`` of them. The
    ratio keeps the bytes rewritten by compaction a geometric series (at most ``1 / (ratio - 1)`` of the
    final size on top of the journal itself); ``max_records`` bounds how many records a load replays
    while the records since outweigh ``1 / ratio`` of the snapshot (past that size, records are let pile
    up to that fraction, so a save's cost stays the same however long the session grows).
    """

    min_bytes: int = 256 * 1024
    ratio: float = 4.0
    max_records: int = 1000
    delete_after: timedelta | None = timedelta(minutes=10)
    """Records folded into ``snapshot_latest.json`` are deleted once this old (None keeps every record).
    Writers idle for half of it check the journal before their next save; machines writing one session
    must agree on the time to within half of it. ``timedelta(0)`` deletes at once and checks before every
    save (one small read: its own last record)."""


_FOLD_CHUNK = 256  # records a fold reads at a time
_ERASE_TRIES = 20  # times a delete places its tombstone after a record another writer just appended


@dataclass
class _Update:
    """A record about to be written, and how it changes what the journal tracks once it is."""

    seq: int
    t: int
    data: bytes
    texts: dict[str, str]
    removed: list[str]
    ops: dict[str, LogOp]
    logs: Mapping[str, Sequence[Any]]  # the caller's logs, read when the record is applied

    def materialized(self) -> _Update:
        """The same update, with copies of the logs it replaces (the caller's lists change afterwards)."""
        return _Update(
            self.seq,
            self.t,
            self.data,
            self.texts,
            self.removed,
            self.ops,
            {name: list(self.logs[name]) for name in self.ops},
        )


class Journal:
    """Loads, saves, compacts and checkpoints one scope (see the module docstring)."""

    def __init__(self, storage: Storage, layout: ScopeLayout, compaction: Compaction | None = None) -> None:
        self.storage = storage
        self.layout = layout
        self.records = RecordStore(storage, layout)  # where the records are: values, or segments
        self.compaction = compaction or Compaction()
        self.seq = -1  # the last record this journal read or wrote
        # Whether the scope has no state: never created, or deleted (its newest record is a tombstone).
        self.absent = True
        self.run_id: str | None = None  # written into each record (see Record.run)
        # A writer may read its own last record back sooner than _recheck_limit's rule (one small read).
        self.recheck_after: float | None = None
        # Which field and log names this scope's records may hold (None: any); see _check_names.
        self.known_names: Callable[[str], bool] | None = None
        self._latest_version: str | None = None
        self._field_text: dict[str, str] = {}
        self._log_refs: dict[str, list[Any]] = {}
        self._latest_bytes = 0
        self._since_bytes = 0
        self._since_records = 0
        self._synced_at = time.monotonic()  # when this journal last knew it was the scope's newest writer
        self._last_t: int | None = None  # record ``seq``'s time, which snapshots of it record
        self._uncertain: _Update | None = None  # a record whose write's outcome is not known yet
        self._fold_due = False  # a compaction succeeded but the fold after it did not
        self.bytes_written = 0

    # -- reading --------------------------------------------------------------------------------------

    async def _read_latest(self) -> tuple[Snapshot, str, int] | None:
        return self._parse_latest(await self.storage.read(self.layout.latest))

    def _parse_latest(self, found: tuple[bytes, str] | None) -> tuple[Snapshot, str, int] | None:
        if found is None:
            return None
        data, version = found
        return decode_model(Snapshot, data, self.layout.latest), version, len(data)

    def _doc_from_snapshot(self, snapshot: Snapshot, key: str) -> Document:
        logs = set(snapshot.journal.logs) if snapshot.journal else set()
        doc = Document(origins=dict.fromkeys(snapshot.data, key))
        checked = snapshot.checksummed
        for name, value in snapshot.data.items():
            if name in logs:
                if not isinstance(value, list):
                    raise SnapshotError(f"{key}: log {name!r} is not a list")
                doc.logs[name] = (
                    decode_messages(value, key, checked=checked) if is_message_log(name) else value
                )
            else:
                doc.fields[name] = value
        return doc

    def _check_agrees(self, snapshot: Snapshot, doc: Document, own: Read) -> None:
        """``snapshot`` says it holds the state after record ``own``: check what can be checked cheaply,
        the record's time and the lengths it left its logs at."""
        info = snapshot.journal
        assert info is not None
        lengths = {
            name: (op.at - op.drop if op.keep is None else op.keep) + len(op.add)
            for name, op in own.record.logs.items()
            if op.at is not None
        }
        wrong = [name for name, length in lengths.items() if len(doc.logs.get(name, ())) != length]
        if (info.t is not None and info.t != own.record.t) or wrong:
            what = f"log {wrong[0]!r}'s length" if wrong else "the record's time"
            raise SnapshotError(
                f"{self.layout.latest}: says it holds the journal up to record {info.seq}, but {what} "
                f"disagrees with {own.key}: the snapshot's journal.seq is wrong, or one of the two files "
                "was replaced. Nothing was loaded; restore the session from an export or an immutable "
                "snapshot"
            )

    def _check_names(self, read: Read) -> None:
        """A record holds only the fields and logs this kind of scope saves; anything else is damage."""
        assert self.known_names is not None
        for name in (*read.record.set, *read.record.unset, *read.record.logs):
            if not self.known_names(name):
                raise SnapshotError(
                    f"{read.key}: field or log {name!r} is not one {self.layout.describe()} saves: the record "
                    "is damaged. Nothing was loaded; restore the session from an export or an immutable "
                    "snapshot"
                )

    async def load(self) -> Document | None:
        """Read the scope's current state (None if it was never created) and track it for later saves.

        A compaction and fold by another writer may delete records this load is reading: it then starts
        again from the new snapshot. Anything else that does not add up is an error naming the file.

        Raises:
            SnapshotError: a file is corrupt, or the snapshots and the journal disagree.
        """
        for _ in range(4):
            try:
                return await self._load_once()
            except Vanished as exc:
                moved = await self.storage.read(self.layout.latest)
                if moved is None or moved[1] == self._latest_version:
                    raise SnapshotError(str(exc)) from None
        raise SnapshotError(
            f"{self.layout.describe()}: its journal was folded four times while loading; try again"
        )

    async def _load_once(self) -> Document | None:
        # The manifest is read beside the snapshot (at once, not one after the other): its schema
        # version is checked like every other file's.
        found_latest, found_manifest = await read_many(
            self.storage, [self.layout.latest, self.layout.manifest]
        )
        latest = self._parse_latest(found_latest)
        if found_manifest is not None:
            decode_model(SnapshotManifest, found_manifest[0], self.layout.manifest)
        snapshot = None
        if latest is None:
            doc, base_seq = Document(), -1
            self._latest_version, self._latest_bytes = None, 0
        else:
            snapshot, self._latest_version, self._latest_bytes = latest
            doc = self._doc_from_snapshot(snapshot, self.layout.latest)
            base_seq = snapshot.journal.seq if snapshot.journal else -1
        self._last_t = snapshot.journal.t if snapshot is not None and snapshot.journal else None
        records = await self.records.read(base_seq, with_after=True, track=True)
        deleted = False
        if records and records[0].seq == base_seq:
            own = records.pop(0)
            deleted = own.record.deleted  # a deleted scope's snapshot, which its delete is removing
            if snapshot is not None and not deleted:
                self._check_agrees(snapshot, doc, own)
            self._last_t = own.record.t
        elif (
            snapshot is not None
            and base_seq >= 0
            and not records
            and snapshot.journal
            and snapshot.journal.t
            and await self.records.any()
        ):
            # The newest record is never deleted, so a snapshot of the newest state finds its own (unless
            # the journal is gone altogether: then the snapshot alone is the state).
            raise SnapshotError(
                f"{self.layout.latest}: says it holds the journal up to record {base_seq}, which is not in "
                f"the journal ({self.layout.describe()}): its journal.seq is wrong. Nothing was loaded; "
                "restore the session from an export or an immutable snapshot"
            )
        tombstones = [index for index, read in enumerate(records) if read.record.deleted]
        if tombstones:  # what came before the last one is deleted (its delete may still be overwriting it)
            records = records[tombstones[-1] :]
        if deleted or tombstones:
            doc = Document()
        for read in records:
            if self.known_names is not None:
                self._check_names(read)
            doc.apply(read.record, read.key)
        if records:
            self._last_t = records[-1].record.t
            deleted = records[-1].record.deleted
        self.seq = records[-1].seq if records else base_seq
        self._synced_at = time.monotonic()
        self._since_records = len(records)
        self._since_bytes = sum(read.size for read in records)
        self.absent = deleted or (latest is None and not records)
        if self.absent:
            self._track(Document())
            return None
        self._track(doc)
        return doc

    async def catch_up(self, doc: Document) -> Document:
        """``doc``, as this journal last loaded it, brought up to the scope's newest record: for a reader
        that follows a scope another process writes. Only the records written since are read (if some
        were folded away meanwhile, the scope is loaded again). What later saves compare with is not
        updated: a journal that catches up is one that only reads."""
        try:
            records = await self.records.read_new(self.seq)
            for read in records:
                doc.apply(read.record, read.key)
                self.seq = read.seq
        except SnapshotError:
            return await self.load() or Document()
        return doc

    def field(self, name: str) -> Any:
        """A field as last saved or loaded (decoded again: the caller may change it), or None."""
        text = self._field_text.get(name)
        return None if text is None else json.loads(text)

    def log(self, name: str) -> list[Any]:
        """A log as last saved or loaded, by reference: read it, do not change it."""
        return self._log_refs.get(name) or []

    async def load_at(self, seq: int) -> Document:
        """The state after record ``seq`` (does not change what this journal tracks)."""
        latest = await self._read_latest()
        if latest is not None and latest[0].journal is not None and latest[0].journal.seq <= seq:
            doc, base = self._doc_from_snapshot(latest[0], self.layout.latest), latest[0].journal.seq
        else:
            doc, base, _ = await self._read_base()
            if base > seq:
                raise SnapshotError(
                    f"{self.layout.describe()}: the records up to {base} were folded into "
                    f"{self.layout.base} and deleted, so the state after record {seq} is gone"
                )
        for read in await self.records.read(base, until=seq):
            doc.apply(read.record, read.key)
        return doc

    async def run_records(self, run_id: str, since_ms: int) -> tuple[list[tuple[int, Record]], bool]:
        """The records that run ``run_id`` wrote (``Record.run``) and their numbers, oldest first, looking back to
        ``since_ms`` (when the run started); and whether the answer is sure: it is not when records
        written since then were folded away, which a run older than ``Compaction.delete_after`` allows."""
        keys = await self.records.keys()
        found: list[tuple[int, Record]] = []
        end = len(keys)
        while end > 0:  # newest first, a batch at a time, back to the run's start
            batch = keys[max(0, end - 16) : end]
            end -= len(batch)
            for key, item in reversed(list(zip(batch, await read_many(self.storage, batch), strict=True))):
                if item is None:
                    continue  # folded meanwhile: older than anything still to find
                for read in reversed(self.records.parse(key, item[0], newest=key == keys[-1])):
                    if read.record.t < since_ms:
                        return found[::-1], True
                    if read.record.run == run_id:
                        found.append((read.seq, read.record))
        # Every record left is younger than the run: those before it, if any, were folded into the base.
        found_base = await self.storage.read(self.layout.base)
        if found_base is None:
            return found[::-1], not keys or self.layout.seq_of(keys[0]) == 0
        base = decode_model(Snapshot, found_base[0], self.layout.base).journal
        return found[::-1], base is not None and base.t is not None and base.t < since_ms

    async def _read_base(self) -> tuple[Document, int, str | None]:
        """``snapshot_base.json``: the state after the last deleted record (or nothing: record -1)."""
        found = await self.storage.read(self.layout.base)
        if found is None:
            return Document(), -1, None
        snapshot = decode_model(Snapshot, found[0], self.layout.base)
        if snapshot.journal is None:
            raise SnapshotError(f"{self.layout.base}: names no journal record")
        return self._doc_from_snapshot(snapshot, self.layout.base), snapshot.journal.seq, found[1]

    def _track(self, doc: Document) -> None:
        self._field_text = {name: dumps(value) for name, value in doc.fields.items()}
        self._log_refs = {name: list(items) for name, items in doc.logs.items()}

    def current(self) -> Document:
        """The document as last saved (fields decoded again, logs by reference)."""
        return Document(
            fields={name: json.loads(text) for name, text in self._field_text.items()},
            logs={name: list(items) for name, items in self._log_refs.items()},
        )

    def _encoded_snapshot(self, journal: JournalInfo, log_texts: Mapping[str, str] | None = None) -> bytes:
        """The document as last saved, as snapshot JSON: the fields' JSON texts (and the logs' in
        ``log_texts``, where the caller has them) are spliced in as they are, instead of decoded and
        encoded again (a compaction of a large run costs one pass, not three)."""
        log_texts = log_texts or {}
        data = [
            f"{dumps(name)}:{text}" for name, text in self._field_text.items() if name not in self._log_refs
        ]
        data += [
            f"{dumps(name)}:{log_texts.get(name) or dumps(items)}" for name, items in self._log_refs.items()
        ]
        return encode_snapshot(self._snapshot(Document(), journal), "{" + ",".join(data) + "}")

    # -- writing --------------------------------------------------------------------------------------

    def _conflict(self, what: str) -> SessionConflictError:
        return SessionConflictError(
            f"{self.layout.describe()}: another writer saved this scope since this one last read it "
            f"({what}). Two live writers (two processes, or two objects with the same session and "
            "agent/orchestrator ids) would overwrite each other's turns, so nothing was written. Reload: "
            "create the agent or orchestrator again with this session manager to continue from the "
            "stored state."
        )

    def _deleted(self) -> SessionConflictError:
        return SessionConflictError(
            f"{self.layout.describe()}: the session was deleted since this writer last read it (by another "
            "process or server), so nothing was written. To start it afresh, create the agent or "
            "orchestrator again with this session manager (orchestra serve does so for the next message)."
        )

    async def _taken(self, seq: int) -> SessionConflictError:
        """Why record ``seq``'s place was taken: a delete's tombstone is there, this writer's own last
        record is gone (its segment too: folded, or the session deleted from outside), or another
        writer's record is there."""
        try:
            found = await self.records.record(seq)
            own = await self.records.record(seq - 1) if found is None and seq > 0 else found
        except (StorageError, SnapshotError):
            found = own = None
        if found is not None and found.record.deleted:
            return self._deleted()
        if own is None and found is None and seq > 0:
            return self._gone()
        return self._conflict(f"journal record {seq} already exists")

    def _gone(self) -> SessionConflictError:
        return SessionConflictError(
            f"{self.layout.describe()}: this writer's last journal record ({self.seq}) is gone: another "
            "writer saved this scope and its records were folded away, or the session was deleted or "
            "pruned while this writer was idle. Nothing was written; create the agent or orchestrator "
            "again to continue from the stored state"
        )

    async def _write(self, key: str, data: bytes, expect: Any) -> str:
        version = await self.storage.write(key, data, expect=expect)
        self.bytes_written += len(data)
        return version

    def _manifest(self) -> bytes:
        delete_after = self.compaction.delete_after
        seconds = None if delete_after is None else delete_after.total_seconds()
        return encode_model(SnapshotManifest(delete_after_s=seconds))

    async def create(self, doc: Document) -> None:
        """Create the scope with ``doc`` as record 0 (after a tombstone: as the record after it); exactly one
        of two racing creators succeeds."""
        if not self.absent:
            raise RuntimeError("create() is for a scope that does not exist yet")
        added = await self._save(doc.fields, doc.logs, (), creating=True)  # the commit point
        # The record holds the whole document, each log from empty: its JSON texts make the snapshot too.
        info = JournalInfo(seq=self.seq, logs=sorted(self._log_refs), t=self._last_t)
        data = self._encoded_snapshot(info, added)
        manifest = self._manifest()

        async def write(key: str) -> None:
            if key == self.layout.manifest:
                await self._write(key, manifest, None)
                return
            try:
                self._latest_version = await self._write(key, data, ABSENT)
            except StorageConflictError:
                # Our record is the first, so a snapshot already there was written by a later writer that
                # loaded it (it is newer: keep it), or is a deleted scope's that its delete is removing.
                latest = await self._read_latest()
                if latest is not None:
                    _, self._latest_version, self._latest_bytes = latest
                return
            self._latest_bytes = len(data)
            self._since_bytes = self._since_records = 0

        # After the commit point: without the snapshot a load replays record 0, so it is housekeeping.
        # The manifest is the same for every writer (a schema version), so it need not wait for the
        # snapshot: the two writes (and their syncs) overlap.
        async with housekeeping(self.layout, "write the first snapshot and the manifest"):
            await map_concurrently(write, [self.layout.latest, self.layout.manifest])

    async def save(
        self,
        fields: Mapping[str, Any],
        logs: Mapping[str, Sequence[Any]],
        unset: Iterable[str] = (),
        *,
        creating: bool = False,
        end: str | None = None,
    ) -> bool:
        """Append a record with what changed among ``fields`` and ``logs``; False if nothing changed.

        Only the fields and logs passed are compared: callers pass what may have changed. The record is
        the save's commit point (see ``orchestra.session._commit``): once it is written the save
        succeeds, whatever the compaction after it does. With ``end``, the record says that run
        ``run_id`` ended with it, with that status (``Record.end``), and is written even if nothing changed.

        Raises:
            SessionConflictError: another writer appended to this scope first; nothing was written.
            StorageError: the record could not be written. ``stored`` says whether it was (False:
                nothing was; None: not known, and the next save settles it by reading the record back).
        """
        return await self._save(fields, logs, unset, creating=creating, end=end) is not None

    async def _save(
        self,
        fields: Mapping[str, Any],
        logs: Mapping[str, Sequence[Any]],
        unset: Iterable[str],
        *,
        creating: bool,
        end: str | None = None,
    ) -> dict[str, str] | None:
        """``save``: None if nothing changed, else the JSON texts of the items added to each log."""
        if self._uncertain is not None:
            await self._settle_uncertain()
        changed: dict[str, Any] = {}
        texts: dict[str, str] = {}
        for name, value in fields.items():
            text = dumps(value)
            if self._field_text.get(name) != text:
                changed[name] = value
                texts[name] = text
        removed = [name for name in unset if name in self._field_text]
        ops: dict[str, LogOp] = {}
        for name, items in logs.items():
            op = diff_log(self._log_refs.get(name, ()), items)
            if op is not None:
                ops[name] = op
        if not (changed or removed or ops or creating or end):
            return None
        # The record's JSON is put together from the texts just made for the comparison: each field is
        # encoded once, and the log ops' messages skip pydantic's serializer (see encode_snapshot).
        t = time.time_ns() // 1_000_000
        body = [f'"t":{t}'] if self.run_id is None else [f'"t":{t}', f'"run":{dumps(self.run_id)}']
        if end is not None:
            body.append(f'"end":{dumps(end)}')
        if changed:
            body.append('"set":{' + ",".join(f"{dumps(name)}:{texts[name]}" for name in changed) + "}")
        if removed:
            body.append(f'"del":{dumps(removed)}')
        added = {name: dumps(op.add) for name, op in ops.items()}
        if ops:
            body.append(
                '"logs":{'
                + ",".join(f"{dumps(name)}:{op_json(op, added[name])}" for name, op in ops.items())
                + "}"
            )
        data = self.records.encode(self.seq + 1, ("{" + ",".join(body) + "}").encode())
        update = _Update(self.seq + 1, t, data, texts, removed, ops, logs)
        if self._must_recheck():
            await self._check_still_newest()
        await self._commit(update)
        if not creating:
            await self._housekeep()
        return added

    async def _commit(self, update: _Update) -> None:
        """Write the record: the commit point. A write whose answer was lost is read back first."""
        key = self.records.key_of(update.seq)
        where = f"{self.layout.describe()}: saving journal record {update.seq}"
        try:
            await self.records.add(update.seq, update.data)
        except StorageConflictError as exc:
            raise await self._taken(update.seq) from exc
        except Exception as exc:  # a StorageError, or anything a storage users wrote raises
            stored = await self.records.outcome(update.seq, update.data, exc)
            reason = exc.reason if isinstance(exc, StorageError) else f"{type(exc).__name__}: {exc}"
            said = exc if isinstance(exc, StorageError) else f"the storage raised {reason}"
            if stored is None:
                # Keep what was tried: the next save reads the record back and settles it.
                self._uncertain = update.materialized()
                raise StorageOutcomeUnknownError(
                    f"{where}: {said}. Whether it was stored is not known: the next save of this scope reads "
                    "it back first (and keeps it if it is there)",
                    operation="write",
                    key=key,
                    reason=reason,
                ) from exc
            if not stored:
                if isinstance(exc, StorageError):
                    raise exc.in_context(f"{where} (nothing was stored)", stored=False) from exc
                raise StorageError(
                    f"{where}: {said}; read back, nothing was stored",
                    operation="write",
                    key=key,
                    reason=reason,
                    stored=False,
                ) from exc
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # Cancelled while the write may be under way (a worker thread finishes it regardless):
                # the next save reads the record back.
                self._uncertain = update.materialized()
            raise
        self.bytes_written += len(update.data)
        self._apply(update)

    async def _settle_uncertain(self) -> None:
        """An earlier record's outcome was not known: read it back. Ours: it was stored, and this journal
        moves past it; absent: it was not; someone else's: another writer won."""
        update = self._uncertain
        assert update is not None
        try:
            found = await self.records.settle(update.seq, update.data)
        except StorageError as exc:
            raise exc.in_context(
                f"{self.layout.describe()}: journal record {update.seq}, whose save's outcome was not known, "
                "could not be read back (nothing new was stored)"
            ) from exc
        self._uncertain = None
        if found == "theirs":
            raise self._conflict(f"journal record {update.seq} was written by another writer")
        if found == "ours":
            self._apply(update)

    def _apply(self, update: _Update) -> None:
        """Track a record as written: later saves are compared with what it holds."""
        self.seq = update.seq
        self.absent = False
        self._last_t = update.t
        self._synced_at = time.monotonic()
        self._field_text.update(update.texts)
        for name in update.removed:
            del self._field_text[name]
        for name, op in update.ops.items():
            kept = self._log_refs.get(name)
            if kept is not None and not op.drop and op.keep is None:
                kept.extend(op.add)  # an appended tail: no copy of the whole log per save
            else:
                self._log_refs[name] = list(update.logs[name])
        self._since_bytes += len(update.data)
        self._since_records += 1

    async def _housekeep(self) -> None:
        """After the commit point: compact and fold when due. Failures are logged and retried by the next
        save (the counters that call for a compaction are reset only by one that succeeds)."""
        if self._should_compact():
            async with housekeeping(self.layout, "compact the journal into snapshot_latest.json"):
                if await self.compact():
                    # The next record starts a segment of its own, so that a fold deletes this one whole.
                    await self.records.seal()
                self._fold_due = self.compaction.delete_after is not None
        if self._fold_due:
            async with housekeeping(self.layout, "fold old journal records into snapshot_base.json"):
                await self.fold()
                self._fold_due = False

    def _recheck_limit(self) -> float:
        """After how long idle a writer reads its own last record back before appending: half of
        ``delete_after`` (see the module docstring), or ``recheck_after`` when that is sooner."""
        delete_after = self.compaction.delete_after
        limits = [delete_after.total_seconds() / 2] if delete_after is not None else []
        if self.recheck_after is not None:
            limits.append(self.recheck_after)
        return min(limits, default=float("inf"))

    @property
    def stored_bytes(self) -> int:
        """About how many bytes the scope holds: its latest snapshot and the records since."""
        return self._latest_bytes + self._since_bytes

    async def is_newest(self) -> bool:
        """Whether nothing was written to the scope since this journal's last record (no record follows
        it: another writer's, or a delete's tombstone) and, once idle for the recheck limit, its own
        record is still the one it wrote. One small read (two when idle that long): what a writer kept in
        memory between uses checks before relying on what it holds."""
        # (A deleted scope's own last record is its tombstone: only a record after it says anything.)
        idle = (
            not self.absent and self.seq >= 0 and time.monotonic() - self._synced_at >= self._recheck_limit()
        )
        if not await self.records.is_newest(self.seq, self._last_t, idle=idle):
            return False
        self._synced_at = time.monotonic()
        return True

    def _must_recheck(self) -> bool:
        """Whether a save reads this journal's last record back before appending: when the next record
        starts a value or segment of its own (an append to a segment is refused by itself if anything
        changed), once idle for the recheck limit, or always for a new segment (rare: after a roll-over)."""
        if self.absent or self.seq < 0:
            return False
        if not self.records.starts_file(self.seq + 1):
            return False
        return self.records.appender is not None or (
            time.monotonic() - self._synced_at >= self._recheck_limit()
        )

    async def _check_still_newest(self) -> None:
        """Before an idle writer appends: its last record must still be there. A record after it makes the
        append itself fail; if newer records were written and folded, its own record went with them."""
        if self.seq < 0:
            return
        found = await self.records.record(self.seq)
        if found is None:
            raise self._gone()
        if found.record.deleted:
            raise self._deleted()
        stored_t = found.record.t
        if self._last_t is not None and stored_t is not None and stored_t != self._last_t:
            # The session was deleted and written again up to the same record number meanwhile.
            raise self._conflict(f"journal record {self.seq} is not the one this writer last read or wrote")
        self._synced_at = time.monotonic()

    def _should_compact(self) -> bool:
        policy = self.compaction
        # By count only once the records since outweigh a ratio-th of the snapshot: rewriting a large
        # snapshot every max_records small records would make each save cost grow with the session.
        if (
            self._since_records >= policy.max_records
            and self._since_bytes * policy.ratio >= self._latest_bytes
        ):
            return True
        return self._since_bytes > max(policy.min_bytes, policy.ratio * self._latest_bytes)

    def _snapshot(
        self, doc: Document, journal: JournalInfo | None, app_data: dict[str, Any] | None = None
    ) -> Snapshot:
        return Snapshot(scope=self.layout.kind, data=doc.flat(), app_data=app_data or {}, journal=journal)

    async def compact(self) -> bool:
        """Write the whole current document to ``snapshot_latest.json`` (compare-and-swap); False if it
        was left as it was.

        Compaction only speeds up loading: the records are already durable. If another writer rewrote the
        snapshot meanwhile (it compacted after an earlier record of its own), ours is at least as new, so
        we write over it; if it is newer than our last record, we leave it.
        """
        data = self._encoded_snapshot(JournalInfo(seq=self.seq, logs=sorted(self._log_refs), t=self._last_t))
        for _ in range(3):
            expect = self._latest_version if self._latest_version is not None else ABSENT
            try:
                self._latest_version = await self._write(self.layout.latest, data, expect)
                break
            except StorageConflictError:
                latest = await self._read_latest()
                if latest is None:
                    self._latest_version = None
                    continue
                theirs, self._latest_version, self._latest_bytes = latest
                if theirs.journal is None or theirs.journal.seq > self.seq:
                    return False
        else:
            return False
        self._latest_bytes = len(data)
        self._since_bytes = 0
        self._since_records = 0
        await self._write(self.layout.manifest, self._manifest(), None)
        return True

    async def fold(self) -> int:
        """Delete the records that ``snapshot_latest.json`` holds, older than ``delete_after`` and than every
        immutable snapshot, after replaying them into ``snapshot_base.json``. Returns how many were deleted.

        Safe beside a live writer: the newest record stays, and the base is written before any record is
        deleted (a crash in between leaves records the next fold deletes).
        """
        delete_after = self.compaction.delete_after
        if delete_after is None:
            return 0
        cutoff = time.time_ns() // 1_000_000 - int(delete_after.total_seconds() * 1000)
        # Nothing to fold while the oldest record is younger than delete_after: say so from that one
        # record, without reading the snapshots (which are as large as the session).
        oldest = await self.records.oldest()
        if oldest is None or oldest.record.t > cutoff:
            return 0
        latest = await self._read_latest()
        if latest is None or latest[0].journal is None:
            return 0
        limit = min(latest[0].journal.seq, self.seq - 1)
        oldest_checkpoint = await self._oldest_checkpoint_seq()
        if oldest_checkpoint is not None:
            limit = min(limit, oldest_checkpoint)
        doc, base_seq, base_version = await self._read_base()
        folded_to = base_seq
        # In chunks, stopping at the first record too young to fold: a long session compacts often, and
        # reading every record since the base each time would make its saves grow with its length.
        young, chunk = False, 1  # the first record alone says whether there is anything to fold yet
        folded_t: int | None = None
        while not young and limit > folded_to:
            for read in await self.records.read(folded_to, until=min(limit, folded_to + chunk)):
                if read.record.t > cutoff:
                    young = True
                    break
                doc.apply(read.record, read.key)
                folded_to, folded_t = read.seq, read.record.t
            chunk = min(chunk * 4, _FOLD_CHUNK)
        if folded_to > base_seq:
            base = self._snapshot(doc, JournalInfo(seq=folded_to, logs=sorted(doc.logs), t=folded_t))
            try:
                await self._write(
                    self.layout.base,
                    encode_snapshot(base),
                    ABSENT if base_version is None else base_version,
                )
            except StorageConflictError:
                return 0  # another process folded meanwhile; it deletes what it folded
        # Also what an interrupted fold left behind (records at or before the base). A segment goes when
        # all of its records do.
        doomed = await self.records.folded_keys(folded_to)
        # Any order will do: whatever an interrupted fold leaves at or before the base, the next one deletes.
        # Deleted as a batch: local files unlink them under one lock and sync the folder once.
        await delete_many(self.storage, doomed)
        return len(doomed)

    async def _oldest_checkpoint_seq(self) -> int | None:
        """The record the oldest immutable snapshot refers to (ids are UUIDv7: listing order is age)."""
        for key in sorted(await self.storage.list(self.layout.immutable)):
            found = await self.storage.read(key)
            if found is None:
                continue
            snapshot = decode_model(Snapshot, found[0], key)
            if snapshot.journal is not None and snapshot.journal.ref:
                return snapshot.journal.seq
        return None

    async def prune_checkpoints(
        self, keep: int | None = None, older_than: timedelta | None = None
    ) -> list[str]:
        """Delete immutable snapshots: all but the newest ``keep``, and those older than ``older_than``.

        Returns the ids deleted. Ids are UUIDv7, so listing order is creation order.
        """
        keys = sorted(await self.storage.list(self.layout.immutable))
        doomed = set(keys[: max(0, len(keys) - keep)]) if keep is not None else set()
        if older_than is not None:
            cutoff = (datetime.now(UTC) - older_than).isoformat()
            for key in keys:
                found = await self.storage.read(key)
                if found is not None and decode_model(Snapshot, found[0], key).created_at < cutoff:
                    doomed.add(key)
        for key in sorted(doomed):
            await self.storage.delete(key)
        prefix = f"{self.layout.immutable}snapshot_"
        return [key[len(prefix) :].removesuffix(".json") for key in sorted(doomed)]

    async def erase(self) -> int:
        """Delete the scope so that every writer sees it before writing again (see the module docstring):
        a tombstone at the next record number, every record before it overwritten by one, every other
        file deleted. Returns how many files held the scope (0: it was already deleted, or never was).

        Raises:
            SessionConflictError: writers kept appending faster than the tombstone could be placed.
        """
        for _ in range(_ERASE_TRIES):
            placed = await self.records.place_tombstone(self._tombstone(), self._snapshot_seq)
            if placed is not None:
                break
        else:
            raise SessionConflictError(
                f"{self.layout.describe()}: writers kept saving while it was being deleted "
                f"({_ERASE_TRIES} tries); stop them and delete it again"
            )
        live, end = placed  # live False: deleted before (finish that delete if it was cut short)
        others = [
            k for k in await self.storage.list(self.layout.prefix) if not k.startswith(self.layout.journal)
        ]
        # Overwritten, not deleted: a writer that fell behind meets a tombstone at its next number too.
        rewritten = await self.records.overwrite_before(end, self._tombstone())
        await delete_many(self.storage, others)
        return rewritten + len(others) if live else 0

    async def _snapshot_seq(self) -> int:
        """The record ``snapshot_latest.json`` holds the state after (-1: none)."""
        latest = await self._read_latest()
        return latest[0].journal.seq if latest is not None and latest[0].journal else -1

    @staticmethod
    def _tombstone() -> bytes:
        return dumps({"t": time.time_ns() // 1_000_000, "deleted": True}).encode()

    async def redact(self, original: Any, redacted: Any) -> int:
        """Replace every stored copy of a log item (journal records, ``snapshot_latest.json``) by
        ``redacted``, so that a redacted message stays nowhere in storage. Returns the files rewritten.

        Records are rewritten in place (compare-and-swap on their version); a snapshot rewritten by a
        concurrent compaction is read again and redacted again.
        """
        before = json.loads(dumps(original))
        after = json.loads(dumps(redacted))

        def scrub(items: list[Any]) -> bool:
            found = False
            for index, item in enumerate(items):
                if item == before:
                    items[index] = after
                    found = True
            return found

        def scrub_record(document: dict[str, Any]) -> bool:
            hits = [scrub(op.get("add", [])) for op in (document.get("logs") or {}).values()]
            return any(hits)  # every log, no short-circuit

        rewritten = await self.records.redact(scrub_record)
        for key in (self.layout.latest, self.layout.base):
            for _ in range(3):
                found = await self.storage.read(key)
                if found is None:
                    break
                data, version = found
                unseal(data, key)  # a damaged file is not rewritten (its checksum would hide the damage)
                document = json.loads(data)
                document.pop(CHECKSUM, None)
                logs = [v for v in (document.get("data") or {}).values() if isinstance(v, list)]
                hits = [scrub(items) for items in logs]  # every log, no short-circuit
                if not any(hits):
                    break
                try:
                    version = await self._write(key, seal(dumps(document).encode()), version)
                except StorageConflictError:
                    continue  # compacted meanwhile: read the new snapshot and scrub it too
                if key == self.layout.latest:
                    self._latest_version = version
                rewritten += 1
                break
        return rewritten

    async def checkpoint(self, snapshot_id: str, app_data: dict[str, Any] | None = None) -> None:
        """Write an immutable snapshot: a reference to "the state after the current record"."""
        info = JournalInfo(seq=self.seq, logs=sorted(self._log_refs), ref=True)
        snapshot = Snapshot(scope=self.layout.kind, app_data=app_data or {}, journal=info)
        await self._write(self.layout.immutable_snapshot(snapshot_id), encode_model(snapshot), ABSENT)

    async def read_checkpoint(self, snapshot_id: str) -> tuple[Document, Snapshot]:
        """The state an immutable snapshot refers to."""
        key = self.layout.immutable_snapshot(snapshot_id)
        found = await self.storage.read(key)
        if found is None:
            raise SnapshotError(f"{key}: no immutable snapshot {snapshot_id!r} in {self.layout.describe()}")
        snapshot = decode_model(Snapshot, found[0], key)
        if snapshot.journal is not None and snapshot.journal.ref:
            return await self.load_at(snapshot.journal.seq), snapshot
        return self._doc_from_snapshot(snapshot, key), snapshot

    def export(self, doc: Document | None = None) -> bytes:
        """A self-contained snapshot of ``doc`` (default: the current state), as JSON bytes."""
        snapshot = self._snapshot(doc or self.current(), None).model_copy(
            update={"scope_id": self.layout.scope_id, "session_id": self.layout.session_id}
        )
        return encode_snapshot(snapshot)


async def writers_delete_after(storage: Storage, layout: ScopeLayout) -> timedelta:
    """The ``Compaction.delete_after`` the scope's last writer recorded in its manifest (the default when
    none was recorded, or the writer keeps every record): ``sessions compact`` deletes nothing younger."""
    found = await storage.read(layout.manifest)
    recorded = None if found is None else decode_model(SnapshotManifest, found[0], layout.manifest)
    if recorded is None or recorded.delete_after_s is None:
        default = Compaction().delete_after
        assert default is not None
        return default
    return timedelta(seconds=recorded.delete_after_s)
