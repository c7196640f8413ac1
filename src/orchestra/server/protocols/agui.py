"""AG-UI (stub)."""

from typing import Any


def mount_agui(*args: Any) -> None:
    return None
