"""``JSONState``: JSON-only key-value state (``agent.state``, and the shared state of orchestrators)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["AgentState", "JSONState"]


def _copy(value: Any) -> Any:
    # A JSON round trip both proves the value is JSON and makes an independent copy; it is faster than
    # copy.deepcopy for JSON-shaped data.
    return json.loads(json.dumps(value, allow_nan=False))


class JSONState:
    """Key-value state whose values must be JSON-serializable.

    ``get`` returns copies, so the only way to change the state is ``set``/``delete``; ``version`` counts
    those changes (sessions use it to skip saving an unchanged state).

    Args:
        initial: the starting keys and values.
        owner: how errors name this state (e.g. ``agent 'writer' state``).
    """

    def __init__(self, initial: Mapping[str, Any] | None = None, *, owner: str = "state") -> None:
        self._owner = owner
        self._data: dict[str, Any] = {}
        self.version = 0
        for key, value in (initial or {}).items():
            self.set(key, value)

    def get(self, key: str | None = None) -> Any:
        """A copy of the value at ``key`` (None if absent), or of the whole state when ``key`` is None."""
        if key is None:
            return _copy(self._data)
        value = self._data.get(key)
        return value if value is None or isinstance(value, str | int | float | bool) else _copy(value)

    def set(self, key: str, value: Any) -> None:
        """Store a copy of ``value`` under ``key``.

        Raises:
            ValueError: the key is not a string or the value is not JSON-serializable.
        """
        if not isinstance(key, str):
            raise ValueError(f"{self._owner}: keys must be strings, got {type(key).__name__} {key!r}")
        try:
            self._data[key] = _copy(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{self._owner}: the value for key {key!r} is not JSON-serializable "
                f"(type {type(value).__name__}): {exc}"
            ) from None
        self.version += 1

    def delete(self, key: str) -> None:
        """Remove ``key`` (nothing happens if it is absent)."""
        if key in self._data:
            del self._data[key]
            self.version += 1

    def replace(self, data: Mapping[str, Any]) -> None:
        """Replace the whole state (used when restoring from a session).

        Always counts as a change, even to ``{}``, so the next save writes the replaced state.
        """
        self._data = {}
        for key, value in data.items():
            self.set(key, value)
        self.version += 1

    def to_dict(self) -> dict[str, Any]:
        """A copy of the whole state."""
        if not self._data:  # the common case for agents: nothing to copy
            return {}
        copied: dict[str, Any] = _copy(self._data)
        return copied

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


AgentState = JSONState
