"""Ids that become storage path segments: session, agent and orchestrator ids."""

from __future__ import annotations

import re

__all__ = ["validate_id"]

_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")  # matched in full: "$" would let a trailing newline through


def validate_id(value: str, what: str) -> str:
    """Check an id: 1-128 letters, digits, ``.``, ``_`` or ``-``, and not a dot-name.

    Raises:
        ValueError: the id is not acceptable; the message names it.
    """
    if not isinstance(value, str) or not _ID.fullmatch(value) or value.startswith("."):
        raise ValueError(
            f"invalid {what} {value!r}: use 1-128 letters, digits, '.', '_' or '-', not starting with '.'"
        )
    return value
