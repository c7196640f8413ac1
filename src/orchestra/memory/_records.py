"""The pure part of the memory store: storage keys, item records, filters and ranking.

Storage layout, under the store's prefix (``memory/`` by default)::

    items/<label>/<label>/.../~/<key>      one item (or its tombstone), a JSON record

Every namespace label and key is percent-encoded (everything but ``A-Z a-z 0-9 _ -``), so a label can
never be ``~``, start with ``.`` or hold a ``/``: ``~`` ends the namespace, and a namespace prefix is a
storage key prefix (``forget`` and ``search`` are one ``list``/``delete_prefix`` of it).

A record is compact JSON: ``{"ns": [...], "key": ..., "value": {...}, "created": t, "updated": t,
"expires": t|null, "vector": "<base64 float32>"|absent}``; a tombstone (left by a conditional delete or
by the TTL sweep, which must not remove a key someone just wrote) is ``{"deleted": t}``: no value.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

__all__ = [
    "END",
    "FILTER_OPERATORS",
    "ITEMS",
    "Index",
    "MemoryItem",
    "Record",
    "build_index",
    "check_filter",
    "decode_record",
    "encode_record",
    "encode_tombstone",
    "item_key",
    "matches",
    "namespace_of",
    "namespace_prefix",
    "rank",
    "text_to_embed",
]

ITEMS = "items/"
END = "~"  # the segment that ends a namespace: no encoded label is ever "~"

FILTER_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One stored memory.

    Attributes:
        namespace: the namespace it lives in, e.g. ``("users", "u1", "preferences")``.
        key: its key within the namespace.
        value: its JSON value (a dict).
        created_at, updated_at: when it was first written and last written (seconds since the epoch).
        expires_at: when its TTL runs out, or None.
        version: the storage version: pass it as ``expect=`` to update or delete only this version.
        score: the similarity to the query (cosine, -1..1) in a ``search`` with a query, else None.
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    expires_at: float | None
    version: str
    score: float | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record: an item (``item`` set, ``vector`` the stored embedding or None) or a tombstone."""

    item: MemoryItem | None
    vector: bytes | None = None

    def live(self, now: float) -> bool:
        item = self.item
        return item is not None and (item.expires_at is None or item.expires_at > now)


def _encode_label(label: str, what: str) -> str:
    if not isinstance(label, str) or not label:
        raise ValueError(f"memory {what} must be non-empty strings, not {label!r}")
    return quote(label, safe="").replace(".", "%2E").replace("~", "%7E")


def namespace_prefix(prefix: Sequence[str]) -> str:
    """The storage key prefix (relative to the store's) of every item under a namespace prefix."""
    if isinstance(prefix, str):
        raise ValueError(f"a memory namespace is a tuple of strings, not the string {prefix!r}")
    return ITEMS + "".join(_encode_label(label, "namespace labels") + "/" for label in prefix)


def item_key(namespace: Sequence[str], key: str) -> str:
    """The storage key (relative to the store's prefix) of one item."""
    if not namespace:
        raise ValueError("a memory namespace needs at least one label, e.g. ('users', user_id)")
    return f"{namespace_prefix(namespace)}{END}/{_encode_label(key, 'keys')}"


def namespace_of(storage_key: str) -> tuple[str, ...] | None:
    """The namespace a storage key (relative to the store's prefix) holds an item of, or None."""
    if not storage_key.startswith(ITEMS):
        return None
    labels = storage_key[len(ITEMS) :].split("/")
    if len(labels) < 3 or labels[-2] != END:
        return None
    return tuple(unquote(label) for label in labels[:-2])


def encode_vector(vector: Sequence[float]) -> bytes:
    """An embedding as unit-length float32 bytes (cosine similarity is then a dot product)."""
    import numpy as np

    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    if array.ndim != 1 or not array.size or not math.isfinite(norm):
        raise ValueError(f"an embedding must be a non-empty list of finite numbers (got shape {array.shape})")
    if norm:
        array = array / norm
    return array.astype("<f4").tobytes()


def encode_record(item: MemoryItem, vector: bytes | None) -> bytes:
    record: dict[str, Any] = {
        "ns": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created": item.created_at,
        "updated": item.updated_at,
        "expires": item.expires_at,
    }
    if vector is not None:
        record["vector"] = base64.b64encode(vector).decode()
    try:
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"memory {item.namespace}/{item.key}: the value is not JSON ({exc}); store dicts of JSON values"
        ) from None


def encode_tombstone(at: float) -> bytes:
    return json.dumps({"deleted": at}).encode()


def decode_record(data: bytes, version: str) -> Record:
    record = json.loads(data)
    if "deleted" in record:
        return Record(None)
    vector = record.get("vector")
    item = MemoryItem(
        namespace=tuple(record["ns"]),
        key=record["key"],
        value=record["value"],
        created_at=record["created"],
        updated_at=record["updated"],
        expires_at=record["expires"],
        version=version,
    )
    return Record(item, base64.b64decode(vector) if vector is not None else None)


def _field(value: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """``value``'s field at a dotted path (``"profile.tier"``): (found, the field)."""
    current: Any = value
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


def text_to_embed(value: Mapping[str, Any], fields: Sequence[str]) -> str | None:
    """The text an item is embedded by: its ``fields`` (dotted paths) that exist, joined by newlines;
    None when it has none of them (the item is stored but not found by a search with a query)."""
    parts = []
    for path in fields:
        found, field = _field(value, path)
        if found and field is not None:
            parts.append(field if isinstance(field, str) else json.dumps(field, ensure_ascii=False))
    return "\n".join(parts) if parts else None


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse an unknown operator up front (a typo would otherwise match nothing, silently)."""
    for path, condition in (filter or {}).items():
        if isinstance(condition, Mapping) and any(str(op).startswith("$") for op in condition):
            unknown = [op for op in condition if op not in FILTER_OPERATORS]
            if unknown:
                raise ValueError(
                    f"memory filter on {path!r}: unknown operator {unknown[0]!r} "
                    f"(known: {', '.join(FILTER_OPERATORS)})"
                )
            for op in ("$in", "$nin"):
                if op in condition and not isinstance(condition[op], list | tuple):
                    raise ValueError(f"memory filter on {path!r}: {op} takes a list")


def _same(a: Any, b: Any) -> bool:
    # JSON equality: True is not 1, 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _ordered(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` compare: two numbers, or two strings (a range across types matches nothing)."""
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    return (isinstance(a, numbers) and isinstance(b, numbers)) or (isinstance(a, str) and isinstance(b, str))


def _holds(op: str, field: Any, operand: Any) -> bool:
    if op == "$eq":
        return _same(field, operand)
    if op == "$ne":
        return not _same(field, operand)
    if op == "$in":
        return any(_same(field, choice) for choice in operand)
    if op == "$nin":
        return not any(_same(field, choice) for choice in operand)
    if not _ordered(field, operand):
        return False
    if op == "$gt":
        return bool(field > operand)
    if op == "$gte":
        return bool(field >= operand)
    if op == "$lt":
        return bool(field < operand)
    return bool(field <= operand)  # $lte


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` passes ``filter``: every entry must hold (see ``FILTER_OPERATORS``).

    ``{"field": x}`` is equality; ``{"field": {"$gte": 1, "$lt": 5}}`` a range (numbers with numbers,
    strings with strings); a missing field passes only ``$ne`` and ``$nin``.
    """
    for path, condition in (filter or {}).items():
        found, field = _field(value, path)
        if isinstance(condition, Mapping) and any(str(op).startswith("$") for op in condition):
            for op, operand in condition.items():
                if not found:
                    if op in ("$ne", "$nin"):
                        continue
                    return False
                if not _holds(op, field, operand):
                    return False
        elif not found or not _same(field, condition):
            return False
    return True


@dataclass(frozen=True, slots=True)
class Index:
    """The ranked part of a namespace prefix, ready for queries: the items that have a vector, their unit
    vectors as one float32 matrix (a row each), and when each expires (``inf``: never)."""

    items: list[MemoryItem]
    matrix: Any
    expires: Any


def build_index(entries: Sequence[tuple[MemoryItem, bytes]]) -> Index:
    """An ``Index`` of ``(item, unit float32 vector bytes)`` pairs.

    Raises:
        ValueError: the vectors do not all have one length (two embedding models in one store).
    """
    import numpy as np

    lengths = {len(vector) for _, vector in entries}
    if len(lengths) > 1:
        raise ValueError(
            f"the store's items have embeddings of {sorted(n // 4 for n in lengths)} dimensions: they were "
            "embedded by different models; put them again with one embedder"
        )
    width = lengths.pop() // 4 if lengths else 0
    matrix = np.frombuffer(b"".join(vector for _, vector in entries), dtype="<f4").reshape(
        len(entries), width
    )
    expires = np.array(
        [np.inf if item.expires_at is None else item.expires_at for item, _ in entries], dtype=np.float64
    )
    return Index([item for item, _ in entries], matrix, expires)


def rank(index: Index, query: bytes, keep: Any, limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best ``(row, score)`` of ``index`` by cosine similarity to ``query`` (unit float32
    bytes) among the rows ``keep`` (a boolean array) allows; ties by namespace then key, so every backend
    returns the same top results.

    Raises:
        ValueError: the query's embedding and the stored ones differ in length.
    """
    import numpy as np

    rows = np.flatnonzero(keep)
    if not len(rows) or limit <= 0:
        return []
    if index.matrix.shape[1] * 4 != len(query):
        raise ValueError(
            f"the query's embedding has {len(query) // 4} dimensions, the stored ones {index.matrix.shape[1]}: "
            "the store's items were embedded by another model; put them again with this embedder"
        )
    scores = (
        index.matrix[rows] @ np.frombuffer(query, dtype="<f4")
        if len(rows) < len(keep)
        else index.matrix @ np.frombuffer(query, dtype="<f4")
    )
    if limit < len(scores):
        # Everything tied with the limit-th best is kept, so the tie-break below sees all of them.
        threshold = np.partition(scores, len(scores) - limit)[len(scores) - limit] - 1e-6
        candidates = np.flatnonzero(scores >= threshold)
    else:
        candidates = np.arange(len(scores))
    items = index.items
    # Scores are ordered rounded to 6 places: float32 sums of tied items may differ in the last bit.
    ranked = sorted(
        candidates.tolist(),
        key=lambda i: (-round(float(scores[i]), 6), items[rows[i]].namespace, items[rows[i]].key),
    )
    return [(int(rows[i]), float(scores[i])) for i in ranked[:limit]]
