"""How a map node's items are scheduled: ``MapScheduler``, a map's part of the run document.

No I/O and no task: it saves the list (or its length), says which items are still to run, records each
item's outcome and says when the map's join holds. The local runner (``_map_run.py``) and the Temporal
workflow drive it. The document keeps a map's progress under ``map/<key>`` (the count),
``map/<key>/items`` (the list) and ``map/<key>/item/<index>`` (each item's result and attempts); ``key``
is the node's id, or ``<node id>:<index>`` for a nested map. Once the map completes they are removed:
its output is in the node's result.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from orchestra.interrupts import Interrupt
from orchestra.messages import Usage
from orchestra.multiagent._run_document import RunDocument
from orchestra.multiagent.map import Map, MapItem
from orchestra.multiagent.results import NodeResult, Status, output_json

__all__ = ["MapScheduler"]

# An item's usage is saved by alias (item_record); a Temporal workflow's records hold the field names.
_USAGE_NAMES = {"inputTokens": "input_tokens", "outputTokens": "output_tokens", "totalTokens": "total_tokens"}


class MapScheduler:
    """The items of map ``key`` of a run.

    ``begin`` starts (or continues) the map; then ``take`` gives the next item to run, ``settle`` records
    how one ended, and ``joined`` says the map is done. ``failure``, ``stopped`` and ``interrupts`` are
    how its items ended so far.
    """

    def __init__(self, document: RunDocument, key: str) -> None:
        self.document = document
        self.key = key
        self.count = 0
        self.done: list[MapItem] = []
        self.queue: deque[int] = deque()
        self.failure: str | None = None
        self.stopped: str | None = None  # a budget was reached: the items still to run wait for a resume
        self.interrupts: list[Interrupt] = []
        self._spec: Map | None = None
        self._items: list[Any] | None = None
        self._joined_remotely = False

    # -- the names of its fields ----------------------------------------------------------------------------

    @staticmethod
    def state_name(key: str) -> str:
        return f"map/{key}"

    @staticmethod
    def items_name(key: str) -> str:
        return f"map/{key}/items"

    @staticmethod
    def item_name(key: str, index: int) -> str:
        return f"map/{key}/item/{index}"

    # -- reading --------------------------------------------------------------------------------------------

    @property
    def started(self) -> int | None:
        """The number of items of the map if it started and did not complete (None: it did not start)."""
        state = self.document.field(self.state_name(self.key))
        return None if state is None else int(state["count"])

    def items(self) -> list[Any]:
        """The list the map fans out over, as saved (empty on a Temporal workflow, which never holds it)."""
        items: list[Any] = self.document.field(self.items_name(self.key)) or []
        return items

    def item(self, index: int) -> dict[str, Any] | None:
        """An item's record (``status``, ``output``, ``usage``, ``attempts``, ...), or None."""
        record: dict[str, Any] | None = self.document.field(self.item_name(self.key, index))
        return record

    def completed(self, count: int | None = None) -> list[int]:
        """The items that completed, in item order."""
        return [i for i in range(self._count(count)) if (self.item(i) or {}).get("status") == "completed"]

    def pending(self, count: int | None = None) -> list[int]:
        """The items still to run, in item order (those without a completed result)."""
        return [i for i in range(self._count(count)) if (self.item(i) or {}).get("status") != "completed"]

    def _count(self, count: int | None) -> int:
        return count if count is not None else (self.started or 0)

    # -- scheduling -----------------------------------------------------------------------------------------

    def begin(self, spec: Map, items: list[Any] | None = None, count: int | None = None) -> int:
        """Start the map (or, if it did not complete, continue it); returns the number of items.

        Local runs give ``items`` (saved with the map); a Temporal workflow gives only ``count`` (its
        activities saved the items)."""
        self._spec = spec
        started = self.started
        if started is None:
            started = len(items) if items is not None else int(count or 0)
            self.document.set(self.state_name(self.key), {"count": started})
            if items is not None:
                self.document.set(self.items_name(self.key), items)
        self.count = started
        self._items = items if items is not None else self.document.field(self.items_name(self.key))
        self.done = []
        self.queue = deque()
        for index in range(started):
            record = self.item(index)
            if record is not None and record.get("status") == "completed":
                self.done.append(self._map_item(index, record.get("output")))
            else:
                self.queue.append(index)
        return started

    def take(self) -> int | None:
        """The next item to run, or None: none is left, or an item failed or a budget was reached."""
        if not self.queue or self.failure is not None or self.stopped is not None:
            return None
        return self.queue.popleft()

    def settle(
        self,
        index: int,
        record: dict[str, Any],
        *,
        interrupts: list[Any] | None = None,
        joined: bool = False,
    ) -> None:
        """An attempt at item ``index`` ended (``record["status"]``: completed, failed, interrupted, or
        stopped by a budget, which is not recorded: the item runs again on resume). ``interrupts``: its
        questions (as JSON), if not in the record; ``joined``: its side found the map's ``until`` join holds."""
        status = record["status"]
        if status == "stopped":
            self.stopped = self.stopped or record.get("error")
            return
        self.document.set(self.item_name(self.key, index), record)
        if status == "completed":
            self.done.append(self._map_item(index, record.get("output")))
            self._joined_remotely = self._joined_remotely or joined
        elif status == "failed":
            if self.failure is None:
                self.failure = f"item {index} failed: {record.get('error')}"
        elif status == "interrupted":
            found = interrupts if interrupts is not None else record.get("interrupts") or []
            self.interrupts.extend(Interrupt.model_validate(i) for i in found)

    def retrying(self, index: int, attempts: list[dict[str, Any]]) -> None:
        """Item ``index`` failed an attempt that its retry policy tries again (saved, for a resume)."""
        self.document.set(self.item_name(self.key, index), {"status": "retrying", "attempts": list(attempts)})

    @property
    def joined(self) -> bool:
        """Whether the map is done: its join holds with the items completed so far."""
        assert self._spec is not None, "begin() first"
        return self._joined_remotely or self._spec.satisfied(self.done, self.count)

    def result(self, node_id: str, spec: Map) -> NodeResult:
        """The map's result from its items' saved results: the completed items' outputs, in item order
        (for a nested map, its outer item's output)."""
        records = [self.item(i) or {} for i in self.completed()]
        tokens = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        for record in records:  # plain sums: a Usage per item cost more than the rest of the result
            for name, count in (record.get("usage") or {}).items():
                name = _USAGE_NAMES.get(name, name)
                if name in tokens:
                    tokens[name] += count
        return NodeResult(
            node_id=node_id,
            status=Status.COMPLETED,
            output=spec.restore_output([record.get("output") for record in records]),
            usage=Usage(**tokens),
        )

    def clear(self) -> None:
        """Remove a completed map's progress (and its nested maps') from the run document."""
        prefix = self.state_name(self.key)
        names = [n for n in self.document.names(prefix) if n == prefix or n[len(prefix)] in "/:"]
        for name in names:
            self.document.remove(name)
        # A Temporal workflow never holds the lists: name them (its own, and its nested maps').
        for name in [
            prefix,
            *(n for n in names if n.startswith(f"{prefix}:") and "/" not in n[len(prefix) :]),
        ]:
            self.document.remove(f"{name}/items")

    def _map_item(self, index: int, output: Any) -> MapItem:
        assert self._spec is not None
        item = self._items[index] if self._items else None
        return MapItem(index, item, self._spec.restore_item(output))

    @staticmethod
    def item_record(result: NodeResult, elapsed_ms: float, attempts: list[dict[str, Any]]) -> dict[str, Any]:
        """An item's saved record from its result (``status``, ``output`` as JSON, ``usage``, its failed
        attempts); ``Map.restore_output`` makes a structured output its model again."""
        record: dict[str, Any] = {
            "status": result.status.value,
            "output": output_json(result.output),
            "usage": {  # Usage's aliases; a dict made here costs less than model_dump per item
                "inputTokens": result.usage.input_tokens,
                "outputTokens": result.usage.output_tokens,
                "totalTokens": result.usage.total_tokens,
            },
            "execution_time_ms": elapsed_ms,
        }
        if attempts:
            record["attempts"] = attempts
        if result.interrupts:
            record["interrupts"] = [i.model_dump(mode="json") for i in result.interrupts]
        if result.status == Status.FAILED:
            record["error"] = result.error
        return record
