"""Interrupts over HTTP: a run's open questions (id, name, reason, and the node or tool that asked), and
the checks on a request that answers them.

A turn or run that stops for a human answers ``"status": "interrupted"`` with ``interrupts``. A later
request on the same session answers them by id (``"responses": [{"interrupt_id", "response"}]``), all at
once or some at a time, on any server, after any restart: the questions live in the session. Answers are
checked with the session loaded, before anything runs: an id the session never asked is 404
``unknown_interrupt``; one already answered (earlier in this wait, or by an earlier run) is 409
``interrupt_already_answered``.

Once a run that answers stored its turn, the run that asked is closed: ``answered``, ``resumed_by`` the
answering run, its questions no longer listed (so no list, page or command shows it waiting). The
answering run does it before it is answered (``close_asking``); a record that still reads waiting
afterwards (its answering server died first, or an older write came after) is closed when read
(``close_if_answered``), on any server: the session's later run records say who answered it.
"""

from __future__ import annotations

from typing import Any

from orchestra.agent import Agent, PendingTools
from orchestra.hosting.outcomes import Refused
from orchestra.hosting.records import RunRecord, RunStore
from orchestra.interrupts import Interrupt
from orchestra.multiagent import MultiAgentBase, Status

__all__ = [
    "ResponsesRefused",
    "all_open",
    "answered_ids",
    "check_responses",
    "close_asking",
    "close_if_answered",
    "open_interrupts",
    "repeats_recorded_answers",
    "response_blocks",
    "waits_for_answers",
]


class ResponsesRefused(Refused):
    """Answers that cannot be given: ``status`` and ``code`` say why (nothing ran, nothing was stored)."""


def _tools(pending: PendingTools | None) -> dict[str, dict[str, Any]]:
    """Which tool call asked each of ``pending``'s interrupts (an id is made from the call's id)."""
    if pending is None:
        return {}
    found = {}
    for interrupt in pending.interrupts.values():
        for use in pending.tool_uses:
            if Interrupt.make_id(use["toolUseId"], interrupt.name) == interrupt.id:
                found[interrupt.id] = {"tool": use["name"], "tool_use_id": use["toolUseId"]}
    return found


def _described(interrupt: Interrupt, node: str | None, tool: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": interrupt.id,
        "name": interrupt.name,
        "reason": interrupt.reason,
        "node": node,
        "tool": (tool or {}).get("tool"),
        "tool_use_id": (tool or {}).get("tool_use_id"),
    }


def open_interrupts(target: Agent | MultiAgentBase) -> list[dict[str, Any]]:
    """The questions ``target`` waits on, each with the node (pipelines) and the tool that asked."""
    if isinstance(target, Agent):
        pending = target.pending_tools
        if pending is None:
            return []
        tools = _tools(pending)
        return [
            _described(i, None, tools.get(i.id)) for i in pending.interrupts.values() if i.response is None
        ]
    if target.status != Status.INTERRUPTED:
        return []
    nodes: dict[str, tuple[str | None, dict[str, Any] | None]] = {}
    for node_id, node in target.nodes.items():
        result = target.node_result(node_id)
        tools = _tools(node.agent.pending_tools) if node.kind == "agent" else {}
        for interrupt in result.interrupts if result is not None else []:
            nodes[interrupt.id] = (node_id, tools.get(interrupt.id))
    described = []
    for raw in target.run.get("interrupts", []):
        interrupt = Interrupt.model_validate(raw)
        asked_by, tool = nodes.get(interrupt.id, (None, None))
        described.append(_described(interrupt, asked_by, tool))
    return described


def answered_ids(target: Agent | MultiAgentBase) -> set[str]:
    """The questions of the current wait that already have their answer."""
    if isinstance(target, Agent):
        pending = target.pending_tools
        return (
            set()
            if pending is None
            else {i.id for i in pending.interrupts.values() if i.response is not None}
        )
    if target.status != Status.INTERRUPTED:
        return set()
    return set(target.run.get("answers") or {})


def all_open(target: Agent | MultiAgentBase, responses: dict[str, Any]) -> bool:
    """Whether every answer is to an interrupt the session has open now (the usual case: nothing to check
    against earlier runs)."""
    open_ids = {i["id"] for i in open_interrupts(target)}
    return all(interrupt_id in open_ids for interrupt_id in responses)


def repeats_recorded_answers(target: Agent | MultiAgentBase, responses: dict[str, Any]) -> bool:
    """Whether ``responses`` are the answers an agent's open turn already recorded, every question of it
    answered: a run that answered them was cut before its turn ended (its server killed), and this is
    that run again (taken over, or repeated with its Idempotency-Key). It finishes the turn, where a new
    answer would be refused."""
    if not isinstance(target, Agent) or target.pending_tools is None or target.open_interrupts():
        return False
    recorded = target.pending_tools.interrupts
    return all(i in recorded and recorded[i].response == response for i, response in responses.items())


def check_responses(
    target: Agent | MultiAgentBase, responses: dict[str, Any], earlier: dict[str, str]
) -> None:
    """Refuse answers that cannot be given now (see the module docstring). ``earlier`` maps interrupt ids
    answered by the session's earlier runs to those runs."""
    open_ids = {i["id"] for i in open_interrupts(target)}
    answered = answered_ids(target)
    for interrupt_id in responses:
        if interrupt_id in open_ids:
            continue
        if interrupt_id in answered or interrupt_id in earlier:
            by = f" by run {earlier[interrupt_id]}" if interrupt_id in earlier else ""
            raise ResponsesRefused(
                409,
                "interrupt_already_answered",
                f"interrupt {interrupt_id!r} was already answered{by}; "
                + (
                    f"the session still waits for {', '.join(sorted(open_ids))}"
                    if open_ids
                    else "nothing is open now"
                ),
            )
        waiting = f"it waits for {', '.join(sorted(open_ids))}" if open_ids else "it waits for no answer"
        raise ResponsesRefused(
            404, "unknown_interrupt", f"the session never asked interrupt {interrupt_id!r}; {waiting}"
        )


def response_blocks(responses: dict[str, Any]) -> list[dict[str, Any]]:
    """The answers as the ``interruptResponse`` blocks agents and pipelines take."""
    return [{"interruptResponse": {"interruptId": i, "response": r}} for i, r in responses.items()]


def waits_for_answers(record: RunRecord) -> bool:
    """Whether a run record says it waits for answers to its interrupts."""
    return record.status == "interrupted" and bool(record.interrupts) and record.session_id is not None


def _answers(answering: RunRecord, asking: RunRecord) -> bool:
    """Whether ``answering`` (a later run of the session, whose turn is stored) answered ``asking``."""
    if answering.stored is not True or answering.run_id <= asking.run_id:
        return False
    asked = {question["id"] for question in asking.interrupts}
    return any(answer["interrupt_id"] in asked for answer in answering.responses)


def _close(asking: RunRecord, answering: RunRecord) -> RunRecord:
    asking.status, asking.resumed_by, asking.interrupts = "answered", answering.run_id, []
    asking.waiting = []
    return asking


async def close_asking(runs: RunStore, answering: RunRecord) -> None:
    """Close the runs of ``answering``'s session whose questions it answered (its turn is stored)."""
    if not answering.responses or answering.stored is not True:
        return
    for record in await runs.list([answering.agent_id], answering.session_id, limit=20):
        if waits_for_answers(record) and _answers(answering, record):
            await runs.save(_close(record, answering))


async def close_if_answered(runs: RunStore, record: RunRecord) -> RunRecord:
    """``record``, closed if a later run of its session answered its questions (see the docstring)."""
    if not waits_for_answers(record):
        return record
    for later in await runs.later(record):
        if _answers(later, record):
            closed = _close(record.model_copy(deep=True), later)
            await runs.save(closed)
            return closed
    return record
