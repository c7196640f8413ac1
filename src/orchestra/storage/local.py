"""``LocalFileStorage``: one file per key under a root folder, written atomically, never via a symlink.

How it stays safe:

- Atomic writes: the data goes to a temp file in the same folder, is fsynced, renamed over the key's file,
  and the folder is fsynced, so a reader (or a process killed mid-write) sees the old value or the new one.
- Conditional writes hold across processes: each folder has a ``.lock`` file taken with ``fcntl.flock``
  around the compare and the rename (only those: the syncs happen outside it, so that writers of one
  folder overlap them; a write or delete returns once the folder is fsynced).
- Create-only writes (``expect=ABSENT``) need neither the lock nor a rename where Linux offers
  ``O_TMPFILE``: the data goes to an unnamed file in the folder, is fsynced, and is linked under the key's
  name, which fails if the name exists (the kernel decides which of two creators wins). A process killed
  before the link leaves nothing behind. Elsewhere they take the path above.
- Appends (``AppendStorage``: a session journal's records) check the file's length and last bytes and
  write under the folder's lock, so they are ordered with compare-and-swap writes (a rename) of that
  file, then ``fdatasync`` outside it: one sync per append. A write cut short (a full disk) is truncated
  away; a process killed in the middle of one leaves the start of it, which the journal recognises.
- No symlink is ever followed below the root: every path is walked one folder at a time with
  ``O_NOFOLLOW`` relative to the parent's descriptor; a symlink found raises ``StorageSecurityError``.
- Folders are created 0700 and files 0600. Names starting with ``.`` are the backend's own (temp and lock
  files) and never appear as keys.

A version is a hash of the content, so it is the same in every process that reads the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio.to_thread

from orchestra.errors import StorageConflictError, StorageOutcomeUnknownError, StorageSecurityError
from orchestra.storage._append import check_append
from orchestra.storage._base import ABSENT, Expect
from orchestra.storage._blocking import BlockingStorage
from orchestra.storage._group_commit import GroupCommit, Pending, Sync

__all__ = ["LocalFileStorage"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK_NAME = ".lock"
_O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)  # Linux only


def _version(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class LocalFileStorage(BlockingStorage):
    """Storage in files under ``root`` (created 0700 if missing); an ``AppendStorage`` too.

    Args:
        root: the folder that holds every key; defaults to ``./.orchestra/``.
        durable: fsync files and folders on every write (turn off only for throwaway data).
    """

    batch_io = True  # a small file reads in tens of microseconds: a thread hop each would cost more

    def __init__(self, root: str | os.PathLike[str] = "./.orchestra/", *, durable: bool = True) -> None:
        self.root = Path(root).absolute()
        self.durable = durable
        # Linking an unnamed file by name goes through /proc (linkat with AT_EMPTY_PATH needs privileges).
        self._links = bool(_O_TMPFILE) and os.path.isdir("/proc/self/fd")
        self._syncs: weakref.WeakValueDictionary[str, GroupCommit] = weakref.WeakValueDictionary()
        self._syncs_lock = threading.Lock()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalFileStorage({str(self.root)!r})"

    # -- folder walking -------------------------------------------------------------------------------

    def _security_error(self, what: str) -> StorageSecurityError:
        return StorageSecurityError(
            f"refusing to follow a symlink or special file at {what!r} under storage root {str(self.root)!r}"
        )

    def _open_dir(self, parts: list[str], *, create: bool) -> int | None:
        """A descriptor of root/parts..., opened without following symlinks; None if absent."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        walked: list[str] = []
        try:
            for part in parts:
                walked.append(part)
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                        if self.durable:
                            os.fsync(fd)
                    child = self._open_child_dir(fd, part, walked)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise self._security_error("/".join(walked)) from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_child_dir(self, fd: int, part: str, walked: list[str]) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise self._security_error("/".join(walked)) from None
            raise

    @staticmethod
    def _split(key: str) -> tuple[list[str], str]:
        *parts, name = key.split("/")
        return parts, name

    @contextlib.contextmanager
    def _locked_dir(self, key: str, *, create: bool, then_sync: bool = False) -> Iterator[int | None]:
        """The key's folder, held under its ``.lock`` for the duration of the block (and fsynced after
        the lock is released, with ``then_sync``: other writers need not wait for the sync)."""
        parts, _ = self._split(key)
        fd = self._open_dir(parts, create=create)
        if fd is None:
            yield None
            return
        try:
            lock = self._acquire_lock(fd)
            try:
                yield fd
            finally:
                os.close(lock)  # closing the descriptor releases the flock
            if then_sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _acquire_lock(fd: int) -> int:
        # delete_prefix may unlink a lock file; a lock taken on an unlinked file protects nothing, so
        # after locking, check that the file is still the one at that name, and try again if not.
        while True:
            lock = os.open(
                _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if os.lstat(_LOCK_NAME, dir_fd=fd).st_ino == os.fstat(lock).st_ino:
                    return lock
            except FileNotFoundError:
                pass
            os.close(lock)

    def _open_regular(self, fd: int, name: str, key: str) -> int | None:
        """A descriptor of the regular file ``name`` in folder ``fd``, read-only, or None when there is
        none; a symlink or anything but a regular file is a ``StorageSecurityError``."""
        try:
            file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._security_error(key) from None
            raise
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            os.close(file_fd)
            raise self._security_error(key)
        return file_fd

    def _read_in(self, fd: int, name: str, key: str) -> tuple[bytes, str] | None:
        file_fd = self._open_regular(fd, name, key)
        if file_fd is None:
            return None
        try:
            chunks = []
            while chunk := os.read(file_fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(file_fd)
        data = b"".join(chunks)
        return data, _version(data)

    # -- sync implementations (run in worker threads) -------------------------------------------------

    def _read(self, key: str) -> tuple[bytes, str] | None:
        parts, name = self._split(key)
        fd = self._open_dir(parts, create=False)
        if fd is None:
            return None
        try:
            return self._read_in(fd, name, key)
        finally:
            os.close(fd)

    def _write(self, key: str, data: bytes, expect: Expect) -> str:
        for _ in range(3):
            try:
                return self._write_once(key, data, expect)
            except FileNotFoundError:
                continue  # a concurrent delete_prefix removed the folder: create it again
        return self._write_once(key, data, expect)

    def _write_once(self, key: str, data: bytes, expect: Expect) -> str:
        # Only the compare and the rename hold the folder's lock: the temp file is written and fsynced
        # before it, the folder fsynced after it, so writers of one folder (the parallel nodes of a run)
        # overlap their syncs instead of queueing for them. The write counts once the folder is fsynced.
        parts, name = self._split(key)
        fd = self._open_dir(parts, create=True)
        assert fd is not None
        try:
            if expect is ABSENT and self._links and self._create_by_link(fd, key, name, data):
                self._sync_written(fd, key)
                return _version(data)
            temp = f".tmp-{name}-{secrets.token_hex(6)}"
            file_fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd
            )
            try:
                try:
                    self._write_all(file_fd, data)
                finally:
                    os.close(file_fd)
                lock = self._acquire_lock(fd)
                try:
                    self._check_expected(fd, key, name, expect)
                    os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
                finally:
                    os.close(lock)  # closing the descriptor releases the flock
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp, dir_fd=fd)
                raise
            self._sync_written(fd, key)
        finally:
            os.close(fd)
        return _version(data)

    def _sync_written(self, fd: int, key: str) -> None:
        """Sync the folder a new value was just given its name in. Writers of one folder share the sync
        (group commit): one fsync answers every writer whose name was in place before it started, and
        the others wait for the next one."""
        if not self.durable:
            return
        folder = key.rpartition("/")[0]
        with self._syncs_lock:
            group = self._syncs.get(folder)
            if group is None:  # held weakly: a folder nobody is writing to costs nothing
                group = self._syncs[folder] = GroupCommit(_FolderSyncs(repr(self)), where=repr(self))
        [pending] = group.run([Sync(key, fd)])
        if pending.error is not None:
            raise pending.error

    @staticmethod
    def _sync_folder(where: str, fd: int, key: str) -> None:
        """fsync a folder a new value is in. The value is in place already, so a failure here cannot say
        "nothing was written": it says the outcome is not known."""
        try:
            os.fsync(fd)
        except OSError as exc:
            reason = f"[Errno {exc.errno}] {exc.strerror}"
            raise StorageOutcomeUnknownError(
                f"{where}: write of {key!r}: the new value is in place, but syncing its folder failed "
                f"({reason}), so it may not survive a power cut; read it back to know",
                operation="write",
                key=key,
                reason=reason,
            ) from exc

    def _write_all(self, file_fd: int, data: bytes) -> None:
        """Write ``data`` to a new file, and fsync it when durable (before it gets its name)."""
        view = memoryview(data)
        while view:
            view = view[os.write(file_fd, view) :]
        if self.durable:
            os.fsync(file_fd)

    def _create_by_link(self, fd: int, key: str, name: str, data: bytes) -> bool:
        """A create-only write as an unnamed file linked into the folder (see the module docstring);
        False, with nothing written, where the file system cannot make unnamed files."""
        try:
            file_fd = os.open(".", _O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
            self._links = False
            return False
        try:
            self._write_all(file_fd, data)
            while True:
                try:  # linkat refuses an existing name (a symlink included) and never follows one
                    os.link(f"/proc/self/fd/{file_fd}", name, dst_dir_fd=fd, follow_symlinks=True)
                    return True
                except FileExistsError:
                    # Raises: the name is taken (a conflict), or is not a regular file (refused). If it
                    # was deleted in between, link again.
                    self._check_expected(fd, key, name, ABSENT)
        finally:
            os.close(file_fd)

    def _check_expected(self, fd: int, key: str, name: str, expect: Expect) -> None:
        """Under the folder's lock (or after a link found the name taken): refuse a write whose condition
        does not hold."""
        try:
            existing = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            existing = None
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise self._security_error(key)
        if expect is ABSENT and existing is not None:
            raise StorageConflictError(f"cannot create {key!r}: it already exists")
        if isinstance(expect, str):
            current = self._read_in(fd, name, key) if existing is not None else None
            if current is None or current[1] != expect:
                found = "it does not exist" if current is None else f"it is at version {current[1]}"
                raise StorageConflictError(f"cannot update {key!r}: expected version {expect}, but {found}")

    # -- appends (AppendStorage) ----------------------------------------------------------------------

    async def append(self, key: str, data: bytes, *, at: int, tail: bytes = b"") -> int:
        check_append(key, at, tail)
        return await anyio.to_thread.run_sync(
            self._guarded, "append", key, self._append, key, bytes(data), at, bytes(tail)
        )

    async def read_from(self, key: str, offset: int) -> bytes | None:
        check_append(key, offset, b"")
        return await anyio.to_thread.run_sync(self._guarded, "read", key, self._read_from, key, offset)

    def _append(self, key: str, data: bytes, at: int, tail: bytes) -> int:
        # The check and the write hold the folder's lock, as a compare-and-swap write's check and rename
        # do: an append never lands in a file that a rewrite is replacing. The sync happens outside it.
        parts, name = self._split(key)
        fd = self._open_dir(parts, create=at == 0)
        if fd is None:
            raise StorageConflictError(f"cannot append to {key!r}: it does not exist")
        file_fd: int | None = None
        try:
            lock = self._acquire_lock(fd)
            try:
                file_fd = self._open_appendable(fd, key, name, create=at == 0)
                self._check_end(file_fd, key, at, tail)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(file_fd, view) :]
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.ftruncate(file_fd, at)  # a short write (a full disk) leaves nothing behind
                    raise
            finally:
                os.close(lock)
            if self.durable:
                self._sync_appended(file_fd, key)
                if at == 0:
                    self._sync_written(fd, key)  # a new file: its name too
        finally:
            if file_fd is not None:
                os.close(file_fd)
            os.close(fd)
        return at + len(data)

    def _open_appendable(self, fd: int, key: str, name: str, *, create: bool) -> int:
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        try:
            file_fd = os.open(name, flags, 0o600, dir_fd=fd)
        except FileNotFoundError:
            raise StorageConflictError(f"cannot append to {key!r}: it does not exist") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._security_error(key) from None
            raise
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            os.close(file_fd)
            raise self._security_error(key)
        return file_fd

    @staticmethod
    def _check_end(file_fd: int, key: str, at: int, tail: bytes) -> None:
        size = os.fstat(file_fd).st_size
        if size != at:
            what = "it already exists" if at == 0 else f"it is {size} bytes long, not {at}"
            raise StorageConflictError(f"cannot append to {key!r}: {what}")
        if tail and os.pread(file_fd, len(tail), at - len(tail)) != tail:
            raise StorageConflictError(f"cannot append to {key!r}: it was rewritten (its end changed)")

    def _sync_appended(self, file_fd: int, key: str) -> None:
        try:
            os.fdatasync(file_fd)
        except OSError as exc:
            reason = f"[Errno {exc.errno}] {exc.strerror}"
            raise StorageOutcomeUnknownError(
                f"{self!r}: append to {key!r}: the bytes are in place, but syncing them failed ({reason}), "
                "so they may not survive a power cut; read them back to know",
                operation="append",
                key=key,
                reason=reason,
            ) from exc

    def _read_from(self, key: str, offset: int) -> bytes | None:
        parts, name = self._split(key)
        fd = self._open_dir(parts, create=False)
        if fd is None:
            return None
        try:
            file_fd = self._open_regular(fd, name, key)
        finally:
            os.close(fd)
        if file_fd is None:
            return None
        try:
            chunks = []
            while chunk := os.pread(file_fd, 1 << 20, offset):
                chunks.append(chunk)
                offset += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(file_fd)

    def _delete(self, key: str) -> None:
        self._delete_many([key])

    def _delete_many(self, keys: Sequence[str]) -> None:
        # The keys of one folder are unlinked under one hold of its lock, and the folder synced once.
        by_folder: dict[str, list[str]] = {}
        for key in keys:
            by_folder.setdefault(key.rpartition("/")[0], []).append(key)
        for folder_keys in by_folder.values():
            with self._locked_dir(folder_keys[0], create=False, then_sync=self.durable) as fd:
                if fd is None:
                    continue
                for key in folder_keys:
                    with contextlib.suppress(FileNotFoundError):
                        name = self._split(key)[1]
                        if not stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                            os.unlink(name, dir_fd=fd)

    def _walk(self, fd: int, base: str, name_prefix: str, out: list[str]) -> None:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.startswith(name_prefix):
                    continue
                key = f"{base}{entry.name}"
                if entry.is_symlink():
                    raise self._security_error(key)
                if entry.is_dir(follow_symlinks=False):
                    child = self._open_child_dir(fd, entry.name, key.split("/"))
                    try:
                        self._walk(child, f"{key}/", "", out)
                    finally:
                        os.close(child)
                elif entry.is_file(follow_symlinks=False):
                    out.append(key)
                else:
                    raise self._security_error(key)

    def _list(self, prefix: str, start_after: str | None, limit: int | None) -> list[str]:
        folder, _, name_prefix = prefix.rpartition("/")
        parts = folder.split("/") if folder else []
        fd = self._open_dir(parts, create=False)
        if fd is None:
            return []
        keys: list[str] = []
        try:
            self._walk(fd, f"{folder}/" if folder else "", name_prefix, keys)
        finally:
            os.close(fd)
        keys.sort()
        if start_after is not None:
            keys = [k for k in keys if k > start_after]
        return keys if limit is None else keys[:limit]

    def _delete_prefix(self, prefix: str) -> int:
        keys = self._list(prefix, None, None)
        self._delete_many(keys)
        self._prune_empty_dirs(prefix)
        return len(keys)

    def _prune_empty_dirs(self, prefix: str) -> None:
        """Remove folders left empty under ``prefix`` (best effort: a concurrent writer may refill one)."""
        folder = prefix.rstrip("/") if prefix.endswith("/") else prefix.rpartition("/")[0]
        if not folder:
            return
        parts = folder.split("/")
        parent = self._open_dir(parts[:-1], create=False)
        if parent is None:
            return
        try:
            self._remove_tree_if_empty(parent, parts[-1])
        finally:
            os.close(parent)

    def _remove_tree_if_empty(self, parent: int, name: str) -> None:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError:
            return
        try:
            with os.scandir(fd) as entries:
                children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            for child, is_dir in children:
                if is_dir:
                    self._remove_tree_if_empty(fd, child)
                elif child == _LOCK_NAME or child.startswith(
                    ".tmp-"
                ):  # ours: a lock, or a killed write's temp
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(child, dir_fd=fd)
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=parent)


class _FolderSyncs:
    """The committer of one folder's group commit: the writers' names are in place, and one fsync of
    the folder makes them all durable (a folder deleted and made again meanwhile is another inode,
    synced on its own)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def commit(self, batch: Sequence[Pending]) -> None:
        by_inode: dict[tuple[int, int], list[Pending]] = {}
        for pending in batch:
            assert isinstance(pending.change, Sync)
            info = os.fstat(pending.change.folder_fd)
            by_inode.setdefault((info.st_dev, info.st_ino), []).append(pending)
        for pendings in by_inode.values():
            first = pendings[0].change
            assert isinstance(first, Sync)
            try:
                LocalFileStorage._sync_folder(self.where, first.folder_fd, first.key)
            except StorageOutcomeUnknownError as exc:
                for pending in pendings:
                    pending.fail(exc)
                continue
            for pending in pendings:
                pending.succeed(None)

    def applied(self, batch: Sequence[Pending]) -> list[bool]:  # pragma: no cover - commit never raises
        return [False] * len(batch)
