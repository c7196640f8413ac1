"""A run's outcome, as every command that ends a run reports it: its output (or why it stopped) and the
documented exit code; and the outcome of a run saved in a session (``orchestra result``, Temporal runs)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import anyio
import typer

from orchestra.agent import Agent
from orchestra.cli._options import open_storage, session_call
from orchestra.cli._output import (
    EXIT_BUDGET,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    err,
    fail,
    out,
    resume_command,
)
from orchestra.cli._waits import report_waiting, waits_of
from orchestra.errors import OrchestraError, SessionError
from orchestra.interrupts import Interrupt
from orchestra.multiagent import MultiAgentBase, Status
from orchestra.multiagent.results import MultiAgentResult, output_text
from orchestra.session import admin
from orchestra.tools.approval import ANSWER_HINT, APPROVAL

__all__ = [
    "agent_resume_problem",
    "check_resumable",
    "report",
    "report_questions",
    "respond_to",
    "result_json",
    "stored_result",
]


def _status(result: Any) -> Status:
    """A pipeline's status; an agent's turn is INTERRUPTED while a tool's question waits for an answer."""
    if isinstance(result, MultiAgentResult):
        return result.status
    return Status.INTERRUPTED if result.interrupts else Status.COMPLETED


def result_json(result: Any, session_id: str) -> dict[str, Any]:
    if isinstance(result, MultiAgentResult):
        data = result.model_dump(mode="json", exclude={"results"})
        data["results"] = {
            n: r.model_dump(mode="json", exclude={"message"}) for n, r in result.results.items()
        }
    else:
        status = _status(result)
        data = {
            "status": status.value,
            "output": str(result) if status == Status.COMPLETED else None,
            "stop_reason": result.stop_reason,
            "interrupts": [i.model_dump(mode="json") for i in result.interrupts],
            "usage": result.metrics.usage.model_dump(by_alias=True),
        }
    data["session_id"] = session_id
    return data


def report(result: Any, session_id: str, again: str, as_json: bool, larger: str | None = None) -> None:
    """Print a run's outcome (the output, or why it stopped) and exit with the documented code.

    ``larger`` is the command that resumes a run stopped by its budget with the limits it reached raised
    (``BudgetFlags.raised``); None when one of its agents' budgets stopped it."""
    status = _status(result)
    if as_json:
        out.print_json(json.dumps(result_json(result, session_id)))
    elif status == Status.COMPLETED:  # an unfinished run has no output: its status is said below
        out.print(
            output_text(result.output) if isinstance(result, MultiAgentResult) else str(result),
            markup=False,
            highlight=False,
        )
    if status == Status.FAILED:
        err.print(f"[red]failed:[/] {result.reason}", highlight=False)
        err.print(
            f"Fix the cause, then resume: {again}",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(EXIT_FAILED)
    if status == Status.INTERRUPTED and not result.interrupts:  # its budget was spent
        err.print(f"[magenta]stopped[/]: {result.reason}", highlight=False)
        hint = (
            f"Resume it with a larger budget: {larger}"
            if larger is not None
            else f"Raise that agent's budget (budget: in its spec), then resume: {again}"
        )
        err.print(hint, highlight=False, markup=False)
        raise typer.Exit(EXIT_BUDGET)
    if status == Status.INTERRUPTED:
        waits = waits_of(result.interrupts)
        raise report_questions(result.interrupts, again) if waits is None else report_waiting(waits, again)


def report_questions(interrupts: list[Interrupt], again: str) -> typer.Exit:
    """Print the open questions and how to answer them; raise the returned exit (code 3)."""
    err.print("[magenta]interrupted[/]: waiting for a response to:")
    for interrupt in interrupts:
        reason = interrupt.reason
        if interrupt.name == APPROVAL and isinstance(reason, dict):  # a tool's call, to approve
            shown = f"{reason.get('tool')} {json.dumps(reason.get('input'))}; answer {ANSWER_HINT}"
        else:
            shown = json.dumps(reason)
        err.print(f"  {interrupt.id}  {interrupt.name}: {shown}", highlight=False, markup=False)
    err.print(
        f"Answer with: {again} --respond {respond_to(i.id for i in interrupts)}",
        highlight=False,
        markup=False,
    )
    return typer.Exit(EXIT_INTERRUPTED)


def respond_to(ids: Any) -> str:
    """What --respond takes: the interrupt's own id when there is one question (ready to paste)."""
    ids = list(ids)
    return f"{ids[0]}=<json>" if len(ids) == 1 else "<id>=<json>"


def stored_result(target: MultiAgentBase, uri: str, session_id: str, again: str) -> MultiAgentResult:
    """The result of the last run of ``target`` saved in a session, as the run returned it."""
    doc = session_call(admin.load_scope, open_storage(uri), session_id, "multiAgent", target.scope_id)
    target.document.load(doc.fields, doc.logs)
    if target.status == Status.EXECUTING:
        raise fail(
            f"the run of session {session_id} is still executing (or its process was killed): follow or "
            f"resume it with: {again}"
        )
    outcome = target.build_result()
    if outcome.status == Status.COMPLETED and outcome.output is None and outcome.execution_order:
        # A swarm run on Temporal keeps its output in the last completed turn's result.
        last = outcome.results.get(outcome.execution_order[-1])
        outcome.output = last.output if last is not None else None
    return outcome


def check_resumable(
    target: MultiAgentBase,
    file: Path,
    uri: str,
    session_id: str,
    *,
    storage: str | None,
    on: str | None = None,
) -> None:
    """Refuse, before anything runs or is drawn, a resume that has nothing to resume (see
    ``resume_problem``)."""
    problem = anyio.run(
        functools.partial(resume_problem, target, file, uri, session_id, storage=storage, on=on)
    )
    if problem is not None:
        raise fail(problem)


async def resume_problem(
    target: MultiAgentBase,
    file: Path,
    uri: str,
    session_id: str,
    *,
    storage: str | None,
    on: str | None = None,
) -> str | None:
    """Why a resume of ``session_id`` has nothing to resume, naming the command that fits instead: the
    session has no run of this pipeline (``orchestra run``), or its run already completed (``orchestra
    result`` shows it); None when there is a run to continue."""
    start = resume_command(file, session_id, storage=storage, on=on, verb="run")
    try:
        doc = await admin.load_scope(open_storage(uri), session_id, "multiAgent", target.scope_id)
    except SessionError:
        return (
            f"session {session_id} has no run of {target.kind} {target.id!r} in {uri} to resume: start one "
            f"with: {start}"
        )
    except OrchestraError:  # the storage itself fails: the run (or the workflow) reports that as usual
        return None
    status = (doc.fields.get("run") or {}).get("status")
    if status == Status.COMPLETED.value:
        shown = resume_command(file, session_id, storage=storage, verb="result")
        return (
            f"the run of session {session_id} already completed: nothing to resume. See its output with: "
            f"{shown} (or start a new run in the session with: {start})"
        )
    return None


def agent_resume_problem(
    agent: Agent, file: Path, uri: str, session_id: str, *, storage: str | None
) -> str | None:
    """Why ``orchestra resume`` of a single agent's session has nothing to do (None: it has): the agent
    waits for no answer and has no unfinished turn (a new message is ``orchestra run``'s)."""
    if agent.open_interrupts() or agent.open_turn() is not None:
        return None
    start = resume_command(file, session_id, storage=storage, verb="run")
    if not agent.messages:
        return (
            f"session {session_id} has no conversation of agent {agent.name!r} in {uri} to resume: start one "
            f"with: {start} --input TEXT"
        )
    return (
        f"agent {agent.name!r} of session {session_id} waits for no answer and has no unfinished turn: "
        f"nothing to resume. Send it a new message with: {start} --input TEXT"
    )
