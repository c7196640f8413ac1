"""What the protocol doors share: the caller's workspace from its key, the hosted agents it may see, and
the text of a run's interrupts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestra.hosting.approvals import ANSWER_HINT, APPROVAL
from orchestra.hosting.config import HostedSpec, ServerConfig
from orchestra.hosting.identity import Identity, may_call
from orchestra.server.auth import Authenticator, AuthRefused

__all__ = ["door_caller", "hosted_in", "interrupt_text", "output_text", "trace_headers"]


async def door_caller(auth: Authenticator, headers: Mapping[str, str]) -> Identity | AuthRefused:
    """The caller of ``Authorization: Bearer <key or JWT>``, made the request's caller, or the refusal
    (its status and the code naming the rule)."""
    try:
        return await auth.identify(headers)
    except AuthRefused as exc:
        return exc


def hosted_in(config: ServerConfig, workspace: str) -> list[HostedSpec]:
    """The hosted agents and pipelines a workspace (and the current caller) may invoke."""
    return [hosted for hosted in config.agents if hosted.workspace == workspace and may_call(hosted)]


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
