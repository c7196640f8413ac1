"""``orchestra run``, ``resume`` and ``result``: run a pipeline here (or on Temporal with ``--on``),
showing each node live, and report how it ended."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.live import Live

from orchestra.agent import Agent
from orchestra.cli._budget import (
    BudgetCalls,
    BudgetCost,
    BudgetFlags,
    BudgetSeconds,
    BudgetTokens,
    PricesOption,
)
from orchestra.cli._options import (
    JsonOption,
    ModelOption,
    OnOption,
    OtlpOption,
    SpecFile,
    StorageOption,
    TemporalApiKey,
    TemporalTls,
    TemporalTlsCa,
    TemporalTlsCert,
    TemporalTlsKey,
    load_spec,
    start_tracing,
    storage_uri,
)
from orchestra.cli._outcome import (
    agent_resume_problem,
    check_resumable,
    report,
    report_questions,
    stored_result,
)
from orchestra.cli._output import (
    EXIT_BUDGET,
    EXIT_FAILED,
    EXIT_SIGNAL,
    EXIT_USAGE,
    err,
    fail,
    live_display,
    resume_command,
)
from orchestra.cli._render import NodeTable
from orchestra.cli._waits import due_answers, report_waiting, wait_here, waits_of
from orchestra.errors import (
    BudgetExceededError,
    OrchestraError,
    SessionConflictError,
    StorageConfigurationError,
    StorageError,
    StorageFullError,
)
from orchestra.multiagent import MultiAgentBase
from orchestra.multiagent.events import MultiAgentResultEvent
from orchestra.multiagent.results import MultiAgentResult
from orchestra.session.writer_lock import WriterLock
from orchestra.spec import build

__all__ = ["app"]

app = typer.Typer()


def _read_input(value: str | None, default: str | None) -> Any:
    """The task: ``-`` reads stdin, ``@FILE`` reads a file, anything else is the task's text. A lone word
    that looks like a file name (``notes.txt``) is refused: it was surely meant as a file."""
    if value == "-":
        text = sys.stdin.read()
        if not text.strip():
            raise fail(
                "--input - read nothing from stdin: pipe the task in, or pass --input TEXT", EXIT_USAGE
            )
        return text
    if value is not None and value.startswith("@"):
        path = Path(value[1:])
        try:
            return path.read_text()
        except OSError as exc:
            raise fail(f"--input {value}: cannot read {path} ({exc.strerror})", EXIT_USAGE) from None
    if value is not None and _FILE_NAME.match(value):
        found = "it exists" if Path(value).exists() else "no such file here"
        raise fail(
            f"--input {value!r} looks like a file name ({found}): write --input @{value} to read a file, "
            "or give the task as text",
            EXIT_USAGE,
        )
    if value is not None:
        return value
    return default


# A lone word with a file suffix: notes.txt, ./task.md, data/brief.json (not "Hello" or "v1.2 please").
_FILE_NAME = re.compile(r"^[\w./~-]*\.(txt|md|json|jsonl|yaml|yml|csv|html|xml|pdf|rst)$", re.IGNORECASE)


async def _run_orchestrator(orchestrator: MultiAgentBase, task: Any, show_table: bool) -> MultiAgentResult:
    table = NodeTable(orchestrator)
    result: MultiAgentResult | None = None
    # Live redraws through table.render at every refresh, so a running node's seconds keep counting.
    live = Live(console=err, refresh_per_second=8, get_renderable=table.render) if show_table else None
    try:
        with live if live is not None else contextlib.nullcontext():
            async with contextlib.aclosing(orchestrator.stream_async(task)) as events:
                async for event in events:
                    table.update(event)
                    if isinstance(event, MultiAgentResultEvent):
                        result = event.result
    finally:
        if show_table:
            err.print()  # what follows (the output, an error, the resume hint) starts on a line of its own
    assert result is not None
    return result


# The flag that raises each limit of a budget (BudgetExceededError.limit).
_BUDGET_FLAGS = {
    "tokens": "--budget-tokens",
    "cost_usd": "--budget-cost",
    "model_calls": "--budget-calls",
    "wall_seconds": "--budget-seconds",
}


def _larger_limit(stop: BudgetExceededError) -> str:
    """The flag that raises the limit an agent's turn reached: doubled, and past what it spent."""
    value = max(stop.allowed * 2, stop.spent + 1)
    shown = f"{value:g}" if stop.limit in ("cost_usd", "wall_seconds") else str(int(value))
    return f"{_BUDGET_FLAGS.get(stop.limit, '--budget-tokens')} {shown}"


def _storage_hint(exc: BaseException, again: str) -> str:
    """What to do after a storage failure, by its type: everything up to the failed save is stored, so a
    resume goes on from there (a save whose outcome is unknown is settled by reading it back)."""
    if isinstance(exc, StorageConfigurationError):
        return ". Fix the storage's settings, then resume: " + again
    if isinstance(exc, StorageFullError):
        return ". Free space, then resume: " + again
    if isinstance(exc, StorageError):
        return ". Resume once the storage answers again: " + again
    return ""


def _execute(
    file: Path,
    target: Any,
    task: Any,
    session_id: str,
    storage: str | None,
    model: str | None,
    as_json: bool,
    budget: BudgetFlags | None = None,
) -> None:
    """Run ``target`` under signal handling and report; exits with the documented codes."""
    again = resume_command(
        file, session_id, storage=storage, model=model, extra=budget.options() if budget else None
    )
    received: list[int] = []

    async def main() -> Any:
        async with anyio.create_task_group() as group:

            async def watch_signals() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        received.append(signum)
                        group.cancel_scope.cancel()
                        return

            group.start_soon(watch_signals)

            async def once(task: Any) -> Any:
                if isinstance(target, MultiAgentBase):
                    return await _run_orchestrator(target, task, show_table=not as_json and live_display())
                return await target.invoke_async(task)

            try:
                outcome: Any = await wait_here(target, await once(task), session_id, once)
            except OrchestraError as exc:
                outcome = exc  # reported below, outside the task group (which would wrap it in a group)
            group.cancel_scope.cancel()
            return outcome

    session_manager = getattr(target, "session_manager", None)
    try:
        with WriterLock(getattr(session_manager, "storage", None), session_id):
            result = anyio.run(main)
    except SessionConflictError as exc:  # another live run of this session: refused before any work
        raise fail(str(exc)) from None
    if isinstance(result, BudgetExceededError) and isinstance(target, Agent):
        # A pipeline's budget stop is a result (saved as interrupted); an agent's rolls its turn back.
        err.print(f"[magenta]stopped[/]: {result}", highlight=False)
        rerun = resume_command(file, session_id, storage=storage, model=model, verb="run")
        err.print(
            f"Run it again with a larger budget: {rerun} --input TEXT {_larger_limit(result)}",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(EXIT_BUDGET)
    if isinstance(result, OrchestraError):
        raise fail(f"{result}{_storage_hint(result, again)}")
    if received:
        signum = received[0]
        name = signal.Signals(signum).name
        err.print(f"[yellow]{name}: the run was saved as interrupted.[/] Resume it with:")
        err.print(f"  {again}", highlight=False, markup=False)
        raise typer.Exit(EXIT_SIGNAL.get(signum, EXIT_FAILED))
    if result is None:  # cancelled without a signal we know
        raise typer.Exit(EXIT_FAILED)
    report(result, session_id, again, as_json, _larger(file, target, session_id, storage, model, budget))


def _larger(
    file: Path,
    target: Any,
    session_id: str,
    storage: str | None,
    model: str | None,
    budget: BudgetFlags | None,
) -> str | None:
    """The resume command with the budget limits the run reached raised (None: none of the run's own)."""
    if not isinstance(target, MultiAgentBase):
        return None
    raised = (budget or BudgetFlags()).raised(target.run)
    if raised is None:
        return None
    return resume_command(file, session_id, storage=storage, model=model, extra=raised.options())


@app.command()
def run(
    file: SpecFile,
    input: Annotated[
        str | None,
        typer.Option(
            "--input",
            "-i",
            metavar="TEXT",
            help="The task; '-' reads it from stdin (default: the spec's input).",
        ),
    ] = None,
    session_id: Annotated[
        str | None, typer.Option("--session-id", metavar="ID", help="Session to run in (default: a new one).")
    ] = None,
    storage: StorageOption = None,
    model: ModelOption = None,
    on: OnOption = None,
    tls: TemporalTls = False,
    tls_cert: TemporalTlsCert = None,
    tls_key: TemporalTlsKey = None,
    tls_ca: TemporalTlsCa = None,
    api_key: TemporalApiKey = None,
    as_json: JsonOption = False,
    otlp_endpoint: OtlpOption = None,
    budget_tokens: BudgetTokens = None,
    budget_cost: BudgetCost = None,
    budget_calls: BudgetCalls = None,
    budget_seconds: BudgetSeconds = None,
    prices: PricesOption = None,
) -> None:
    """Run a pipeline, showing each node's status live, then its output.

    Example: [bold]orchestra run examples/graphs/review_loop.yaml --input "Write about tides"[/]
    """
    start_tracing(otlp_endpoint, "orchestra-run")
    loaded = load_spec(file)
    task = _read_input(input, loaded.spec.input)
    if task is None:
        raise fail(f"{file} has no input: pass --input TEXT (or '-' to read stdin)", 2)
    session_id = session_id or f"run-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    budget = BudgetFlags(budget_tokens, budget_cost, budget_calls, budget_seconds, prices)
    if on is not None:
        from orchestra.cli._temporal import run_on_temporal

        connection = _temporal_connection(tls, tls_cert, tls_key, tls_ca, api_key)
        run_on_temporal(
            file,
            loaded,
            on,
            task,
            session_id,
            storage,
            as_json,
            resume=False,
            responses={},
            connection=connection,
            budget=budget,
        )
        return
    try:
        target = build(loaded, model=model, session_id=session_id, storage=storage)
        budget.apply(target)
    except (OrchestraError, ValueError) as exc:
        raise fail(str(exc)) from None
    if not as_json:
        err.print(f"session: {session_id}", highlight=False)
    _execute(file, target, task, session_id, storage, model, as_json, budget)


def _temporal_connection(
    tls: bool, cert: Path | None, key: Path | None, ca: Path | None, api_key: str | None
) -> Any:
    """The TLS and API-key settings for --on, as orchestra worker takes them (flags or variables)."""
    from orchestra.temporal import TemporalConnection

    return TemporalConnection(
        tls=tls,
        tls_cert=str(cert) if cert else None,
        tls_key=str(key) if key else None,
        tls_ca=str(ca) if ca else None,
        api_key=api_key,
    )


def _parse_responses(responses: list[str]) -> list[dict[str, Any]]:
    blocks = []
    for item in responses:
        interrupt_id, sep, raw = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"{item!r} is not ID=VALUE", param_hint="--respond")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        blocks.append({"interruptResponse": {"interruptId": interrupt_id, "response": value}})
    return blocks


@app.command()
def resume(
    file: SpecFile,
    session_id: Annotated[
        str, typer.Option("--session-id", metavar="ID", help="The session of the run to continue.")
    ],
    storage: StorageOption = None,
    model: ModelOption = None,
    respond: Annotated[
        list[str],
        typer.Option(
            "--respond", metavar="ID=VALUE", help="Answer an interrupt: ID=VALUE (VALUE is JSON or text)."
        ),
    ] = [],  # noqa: B006
    force: Annotated[
        bool,
        typer.Option("--force", metavar="", help="Resume even if the graph changed since the run was saved."),
    ] = False,
    on: OnOption = None,
    tls: TemporalTls = False,
    tls_cert: TemporalTlsCert = None,
    tls_key: TemporalTlsKey = None,
    tls_ca: TemporalTlsCa = None,
    api_key: TemporalApiKey = None,
    as_json: JsonOption = False,
    budget_tokens: BudgetTokens = None,
    budget_cost: BudgetCost = None,
    budget_calls: BudgetCalls = None,
    budget_seconds: BudgetSeconds = None,
    prices: PricesOption = None,
) -> None:
    """Continue an interrupted or failed run; nodes that completed do not run again.

    A run stopped by its budget continues with the budget given here (larger, or it stops again before
    its next model call).

    Example: [bold]orchestra resume examples/graphs/review_loop.yaml --session-id run-20261130-101500-ab12[/]
    """
    loaded = load_spec(file)
    budget = BudgetFlags(budget_tokens, budget_cost, budget_calls, budget_seconds, prices)
    if on is not None:
        from orchestra.cli._temporal import run_on_temporal

        answers = {
            b["interruptResponse"]["interruptId"]: b["interruptResponse"]["response"]
            for b in _parse_responses(respond)
        }
        connection = _temporal_connection(tls, tls_cert, tls_key, tls_ca, api_key)
        run_on_temporal(
            file,
            loaded,
            on,
            None,
            session_id,
            storage,
            as_json,
            resume=True,
            responses=answers,
            force=force,
            connection=connection,
            budget=budget,
        )
        return
    try:
        target = build(loaded, model=model, session_id=session_id, storage=storage)
        budget.apply(target)
    except (OrchestraError, ValueError) as exc:
        raise fail(str(exc)) from None
    task: Any = _parse_responses(respond) or None
    if isinstance(target, Agent):
        # A single agent's session resumes the turn it left: answers to its tool's questions, or the
        # rest of a turn a killed process left open.
        problem = agent_resume_problem(
            target, file, storage_uri(loaded, storage), session_id, storage=storage
        )
        if problem is not None:
            raise fail(problem)
        waits = waits_of(target.open_interrupts())
        if task is None and waits is not None:  # a waiting turn: answer the waits that are due
            answers = anyio.run(due_answers, target, waits, session_id)
            task = [{"interruptResponse": {"interruptId": i, "response": a}} for i, a in answers.items()]
            if not task:
                again = resume_command(file, session_id, storage=storage, model=model)
                raise report_waiting(waits, again)
        if task is None and target.open_interrupts():  # a resume without answers changes nothing
            again = resume_command(file, session_id, storage=storage, model=model, extra=budget.options())
            raise report_questions(target.open_interrupts(), again)
        _execute(file, target, task, session_id, storage, model, as_json, budget)
        return
    check_resumable(target, file, storage_uri(loaded, storage), session_id, storage=storage)
    if force:
        original = target.invoke_async

        async def forced(task: Any = None, **kwargs: Any) -> Any:
            return await original(task, force_resume=True, **kwargs)

        target.invoke_async = forced  # type: ignore[method-assign]
        target.stream_async = _forced_stream(target)  # type: ignore[method-assign]
    _execute(file, target, task, session_id, storage, model, as_json, budget)


def _forced_stream(target: MultiAgentBase) -> Any:
    original = target.stream_async

    def stream(task: Any = None, **kwargs: Any) -> Any:
        return original(task, force_resume=True, **kwargs)

    return stream


@app.command()
def result(
    file: SpecFile,
    session_id: Annotated[str, typer.Option("--session-id", metavar="ID", help="The session of the run.")],
    storage: StorageOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the outcome of a pipeline's last run in a session, running nothing: a run that finished on
    Temporal after you stopped following it, or any local one. Exit codes as for run.

    Example: [bold]orchestra result examples/graphs/review_loop.yaml --session-id demo --json[/]
    """
    loaded = load_spec(file)
    target = build(loaded)
    if not isinstance(target, MultiAgentBase):
        raise fail(f"{file} is a single agent: its session is a conversation; see 'orchestra sessions show'")
    uri = storage_uri(loaded, storage)
    again = resume_command(file, session_id, storage=storage)
    outcome = stored_result(target, uri, session_id, again)
    ran_under = BudgetFlags(**(target.run.get("budget") or {}))  # the limits it ran under, flags included
    report(outcome, session_id, again, as_json, _larger(file, target, session_id, storage, None, ran_under))
