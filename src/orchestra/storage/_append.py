"""``AppendStorage``: an optional capability, adding bytes at the end of a value under a condition.

A backend offers it where an append costs less than a new value. On local files a new value is a new
file, which is durable once the file and its folder are synced (two syncs); an append to a file that
exists is durable after one ``fdatasync``. Session journals append their records to a segment per scope
where the storage offers this (``orchestra.session``), and write one value per record elsewhere.

The condition is what a create-only write is for values: a second writer that is behind is refused, not
merged. An append names the length it expects the value to have (``at``) and the bytes it expects it to
end with (``tail``): a value rewritten meanwhile (a compare-and-swap write, a delete) refuses it even when
its length came out the same.

Wrappers offer appends only where they mean to (``PrefixedStorage`` does, when its inner storage does): an
encrypting wrapper must not pass plaintext appends on, so ``ForwardingStorage`` does not forward them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from orchestra.storage._base import Storage, validate_key

__all__ = ["AppendStorage", "appendable", "check_append"]


@runtime_checkable
class AppendStorage(Storage, Protocol):
    """A ``Storage`` that can also append to a value. Every implementation runs the conformance suite in
    ``tests/storage/test_append.py`` (racing appenders, rewrites between appends, missing keys)."""

    async def append(self, key: str, data: bytes, *, at: int, tail: bytes = b"") -> int:
        """Add ``data`` at the end of the value under ``key``, if the value is ``at`` bytes long and ends
        with ``tail`` (``at=0``: the key is absent or empty, and is created). Durable when it returns, as a
        write is. Returns the value's new length.

        Raises:
            StorageConflictError: the condition did not hold; nothing was written.
        """
        ...

    async def read_from(self, key: str, offset: int) -> bytes | None:
        """The value's bytes from ``offset`` to its end (empty at or past its end), or None if ``key``
        does not exist."""
        ...


def appendable(storage: Storage) -> AppendStorage | None:
    """``storage`` if it offers appends, else None. A wrapper says whether it does through ``appends``
    (whether its inner storage does, say)."""
    if isinstance(storage, AppendStorage) and getattr(storage, "appends", True):
        return storage
    return None


def check_append(key: str, at: int, tail: bytes) -> None:
    """Refuse an append whose key or condition is malformed (before any I/O)."""
    validate_key(key)
    if at < 0 or len(tail) > at:
        raise ValueError(f"append to {key!r}: at={at} with a tail of {len(tail)} bytes is not a condition")
