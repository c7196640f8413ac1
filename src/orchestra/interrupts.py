"""Interrupts: a run stops to ask a human (or the calling application) something, then resumes.

An interrupt is a control-flow signal, not an error. A tool raises one with
``tool_context.interrupt(name, reason)``; the agent (and any Graph or Swarm around it) stops with
status INTERRUPTED and lists the open questions in ``result.interrupts``. Invoking again with responses
(``[{"interruptResponse": {"interruptId": ..., "response": ...}}]``) resumes where the run stopped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["Interrupt", "InterruptException", "interrupt_responses", "is_interrupt_responses"]


class Interrupt(BaseModel):
    """A question a run is waiting on.

    Attributes:
        id: stable id, derived from where the interrupt was raised; answer with it.
        name: what is asked, chosen by the tool or hook (e.g. ``"approval"``).
        reason: any JSON the asker wants to show (e.g. the draft to approve).
        response: the answer, once given.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    reason: Any = None
    response: Any = None

    @staticmethod
    def make_id(origin: str, name: str) -> str:
        """A deterministic id, so the same question asked again after a resume has the same id."""
        return "int-" + hashlib.sha256(f"{origin}\x00{name}".encode()).hexdigest()[:16]

    def to_response(self, response: Any) -> dict[str, Any]:
        """The block that answers this interrupt, to pass back to the agent or orchestrator."""
        return {"interruptResponse": {"interruptId": self.id, "response": response}}


class InterruptException(Exception):  # a signal, not an error: see the module docstring
    """Raised inside a tool or hook to stop the run for an interrupt."""

    def __init__(self, interrupt: Interrupt) -> None:
        super().__init__(f"interrupted: {interrupt.name}")
        self.interrupt = interrupt


def is_interrupt_responses(prompt: Any) -> bool:
    """Whether a prompt is a list of ``interruptResponse`` blocks."""
    return (
        isinstance(prompt, Sequence)
        and not isinstance(prompt, str)
        and len(prompt) > 0
        and all(isinstance(item, Mapping) and "interruptResponse" in item for item in prompt)
    )


def interrupt_responses(prompt: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{interrupt_id: response}`` from a list of ``interruptResponse`` blocks."""
    return {
        item["interruptResponse"]["interruptId"]: item["interruptResponse"]["response"] for item in prompt
    }
