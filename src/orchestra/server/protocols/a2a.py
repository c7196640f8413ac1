"""A2A (stub)."""

from typing import Any


def mount_a2a(*args: Any) -> None:
    return None
