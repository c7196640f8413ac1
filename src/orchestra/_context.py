"""Context variables that carry the running orchestrator down to tools and function nodes."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

__all__ = ["current_orchestrator"]

current_orchestrator: ContextVar[Any] = ContextVar("orchestra_current_orchestrator", default=None)
"""The Graph or Swarm whose node is running in this task (None outside orchestrators)."""
