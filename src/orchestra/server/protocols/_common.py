"""What the protocol doors share: the caller's workspace from its key, the hosted agents it may see, and
the text of a run's interrupts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestra.hosting.approvals import ANSWER_HINT, APPROVAL
from orchestra.hosting.config import HostedSpec, ServerConfig
from orchestra.server.auth import KeyRing

__all__ = ["bearer_workspace", "hosted_in", "interrupt_text", "output_text", "trace_headers"]


def bearer_workspace(keys: KeyRing, headers: Mapping[str, str]) -> str | None:
    """The workspace of ``Authorization: Bearer <key>`` (None: missing or unknown key)."""
    scheme, _, key = (headers.get("authorization") or "").partition(" ")
    return keys.workspace_of(key.strip()) if scheme.lower() == "bearer" else None


def hosted_in(config: ServerConfig, workspace: str) -> list[HostedSpec]:
    """The hosted agents and pipelines a workspace may invoke."""
    return [hosted for hosted in config.agents if hosted.workspace == workspace]


def description_of(config: ServerConfig, hosted: HostedSpec) -> str:
    spec = config.spec_of(hosted.id).spec
    return hosted.description or spec.description or f"The {hosted.id} {spec.kind}."


def output_text(output: Any) -> str:
    """A run's output as text (a structured output as its JSON)."""
    if output is None:
        return ""
    return output if isinstance(output, str) else json.dumps(output, default=str)


def interrupt_text(interrupts: list[dict[str, Any]]) -> str:
    """What an interrupted run asks, one line per question."""
    lines = []
    for interrupt in interrupts:
        reason = interrupt.get("reason")
        if interrupt["name"] == APPROVAL and isinstance(reason, dict):  # the tool and its arguments
            call = f"{reason.get('tool')} {json.dumps(reason.get('input'))}"
            lines.append(f"{APPROVAL}: {call} (interrupt {interrupt['id']}); answer {ANSWER_HINT}")
            continue
        shown = "" if reason is None else f": {output_text(reason)}"
        lines.append(f"{interrupt['name']}{shown} (interrupt {interrupt['id']})")
    return "\n".join(lines)


def trace_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The W3C trace context of a request, so the run's spans continue the caller's trace."""
    return {k: v for k in ("traceparent", "tracestate") if (v := headers.get(k))}
