"""The ``orchestra`` command: run, resume, validate and draw pipelines; look after sessions.

Exit codes: 0 the run completed (or the command succeeded); 1 the run failed, the spec is invalid, or
the command could not do what was asked; 2 the command line was wrong; 3 the run stopped for a human
(an interrupt waiting for a response); 4 the run spent its budget (resume it with a larger one); 130
stopped by Ctrl-C (SIGINT) and 143 by SIGTERM: the run is saved as interrupted and the exact command
that resumes it is printed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import secrets
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import anyio
import structlog
import typer
from rich.live import Live
from rich.table import Table

from orchestra.cli._budget import (
    BudgetCalls,
    BudgetCost,
    BudgetFlags,
    BudgetSeconds,
    BudgetTokens,
    PricesOption,
)
from orchestra.cli._migrate import migrate_command
from orchestra.cli._output import (
    EXIT_BUDGET,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SIGNAL,
    EXIT_USAGE,
    err,
    fail,
    out,
    resume_command,
)
from orchestra.cli._render import NodeTable, diagram
from orchestra.cli._runs import runs_app
from orchestra.errors import (
    OrchestraError,
    OrchestraSpecError,
    SessionConflictError,
    StorageConfigurationError,
    StorageError,
    StorageFullError,
)
from orchestra.multiagent import Graph, MultiAgentBase, Status
from orchestra.multiagent.events import MultiAgentResultEvent
from orchestra.multiagent.results import MultiAgentResult, output_text
from orchestra.session import admin
from orchestra.session.writer_lock import WriterLock
from orchestra.spec import build, json_schema, parse_file
from orchestra.storage import DEFAULT_STORAGE_URI, storage_from_uri

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "app", "main"]

app = typer.Typer(
    name="orchestra",
    help="Run multi-agent pipelines that never lose their progress.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,  # main() turns unexpected errors into one line (--debug for more)
)
sessions_app = typer.Typer(help="Look after stored sessions (any storage URI).", no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")
sessions_app.command("migrate")(migrate_command)
app.add_typer(runs_app, name="runs")  # orchestra runs list/show/cancel/stream --url (cli/_runs.py)

StorageOption = Annotated[
    str | None,
    typer.Option(
        "--storage",
        metavar="URI",
        help="Storage URI: file:./dir, s3://bucket/prefix, sqlite:./file.db, postgresql://host/db or memory (default: the spec's, or file:./.orchestra).",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="SPEC",
        help="A model for every agent, overriding the file: openai:<m>, bedrock:<id>, ollama:<m>, scripted.",
    ),
]
OtlpOption = Annotated[
    str | None,
    typer.Option(
        "--otlp-endpoint",
        metavar="URL",
        envvar="ORCHESTRA_OTLP_ENDPOINT",
        help="Send OpenTelemetry traces to this OTLP/HTTP collector (http://host:4318); needs "
        "pip install 'orchestra[otel]'.",
    ),
]


def _start_tracing(endpoint: str | None, service: str) -> None:
    if endpoint is None:
        return
    from orchestra.tracing import configure_otlp

    try:
        configure_otlp(endpoint, service)
    except RuntimeError as exc:
        raise fail(str(exc), 2) from None
    os.environ["ORCHESTRA_OTLP_ENDPOINT"] = endpoint  # server worker processes configure it too


JsonOption = Annotated[
    bool, typer.Option("--json", metavar="", help="Print the result as JSON instead of a table and text.")
]
OnOption = Annotated[
    str | None,
    typer.Option(
        "--on",
        metavar="URI",
        help="Run on Temporal instead of here: temporal://HOST:PORT/NAMESPACE?task_queue=QUEUE.",
    ),
]


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (tests swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _configure_logging(ctx: typer.Context, log_format: str, verbosity: int) -> None:
    """Send orchestra's logs to stderr for this command, and put the logging setup back afterwards."""
    level = logging.WARNING - 10 * min(verbosity, 2)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.ExtraAdder(),  # the key-values orchestra's loggers pass as extras
                structlog.processors.TimeStamper(fmt="iso"),
            ],
        )
    )
    logger = logging.getLogger("orchestra")
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)

    ctx.call_on_close(restore)


@app.callback()
def _root(
    ctx: typer.Context,
    log_format: Annotated[
        str, typer.Option("--log-format", help="console or json log lines on stderr.")
    ] = "console",
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="More logs: -v info, -vv debug.")
    ] = 0,
) -> None:
    """Run multi-agent pipelines that never lose their progress.

    Example: [bold]orchestra run examples/graphs/review_loop.yaml[/]
    """
    if log_format not in ("console", "json"):
        raise typer.BadParameter("use console or json", param_hint="--log-format")
    _configure_logging(ctx, log_format, verbose)


def _load_spec(file: Path) -> Any:
    try:
        return parse_file(file)
    except OrchestraSpecError as exc:
        for line in exc.errors:
            err.print(line, highlight=False, markup=False)
        raise typer.Exit(EXIT_FAILED) from None


def _read_input(value: str | None, default: str | None) -> Any:
    if value == "-":
        text = sys.stdin.read()
        if not text.strip():
            raise fail(
                "--input - read nothing from stdin: pipe the task in, or pass --input TEXT", EXIT_USAGE
            )
        return text
    if value is not None:
        return value
    return default


def _result_json(result: Any, session_id: str) -> dict[str, Any]:
    if isinstance(result, MultiAgentResult):
        data = result.model_dump(mode="json", exclude={"results"})
        data["results"] = {
            n: r.model_dump(mode="json", exclude={"message"}) for n, r in result.results.items()
        }
    else:
        data = {
            "status": "completed",
            "output": str(result),
            "stop_reason": result.stop_reason,
            "usage": result.metrics.usage.model_dump(by_alias=True),
        }
    data["session_id"] = session_id
    return data


async def _run_orchestrator(orchestrator: MultiAgentBase, task: Any, show_table: bool) -> MultiAgentResult:
    table = NodeTable(orchestrator)
    result: MultiAgentResult | None = None
    with (
        Live(table.render(), console=err, refresh_per_second=8, transient=False)
        if show_table
        else contextlib.nullcontext() as live
    ):
        async with contextlib.aclosing(orchestrator.stream_async(task)) as events:
            async for event in events:
                table.update(event)
                if live is not None:
                    live.update(table.render())
                if isinstance(event, MultiAgentResultEvent):
                    result = event.result
    if show_table:
        err.print()  # the output line starts on a line of its own, after the table
    assert result is not None
    return result


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
            try:
                if isinstance(target, MultiAgentBase):
                    outcome: Any = await _run_orchestrator(target, task, show_table=not as_json)
                else:
                    outcome = await target.invoke_async(task)
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
    _report(result, session_id, again, as_json)


def _report(result: Any, session_id: str, again: str, as_json: bool) -> None:
    """Print a run's outcome (the output, or why it stopped) and exit with the documented code."""
    status = result.status if isinstance(result, MultiAgentResult) else Status.COMPLETED
    if as_json:
        out.print_json(json.dumps(_result_json(result, session_id)))
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
        err.print(
            f"Resume it with a larger budget: {again} --budget-tokens N (or --budget-cost, --budget-calls, "
            "--budget-seconds)",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(EXIT_BUDGET)
    if status == Status.INTERRUPTED:
        err.print("[magenta]interrupted[/]: waiting for a response to:")
        for interrupt in result.interrupts:
            err.print(
                f"  {interrupt.id}  {interrupt.name}: {json.dumps(interrupt.reason)}",
                highlight=False,
                markup=False,
            )
        err.print(
            f"Answer with: {again} --respond <id>=<json>",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(EXIT_INTERRUPTED)


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="The pipeline spec (YAML).", exists=True, dir_okay=False)],
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
    _start_tracing(otlp_endpoint, "orchestra-run")
    loaded = _load_spec(file)
    task = _read_input(input, loaded.spec.input)
    if task is None:
        raise fail(f"{file} has no input: pass --input TEXT (or '-' to read stdin)", 2)
    session_id = session_id or f"run-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    budget = BudgetFlags(budget_tokens, budget_cost, budget_calls, budget_seconds, prices)
    if on is not None:
        from orchestra.cli._temporal import run_on_temporal

        _no_budget_on_temporal(loaded, budget)
        run_on_temporal(file, loaded, on, task, session_id, storage, as_json, resume=False, responses={})
        return
    try:
        target = build(loaded, model=model, session_id=session_id, storage=storage)
        budget.apply(target)
    except (OrchestraError, ValueError) as exc:
        raise fail(str(exc)) from None
    if not as_json:
        err.print(f"session: {session_id}", highlight=False)
    _execute(file, target, task, session_id, storage, model, as_json, budget)


def _no_budget_on_temporal(loaded: Any, budget: BudgetFlags) -> None:
    """Temporal runs do not enforce budgets yet: refuse one rather than run it uncapped."""
    spec = loaded.spec
    if budget.given() or spec.budget is not None or any(a.budget is not None for a in spec.agents):
        raise fail(
            "budgets are enforced by local runs only; Temporal runs do not enforce them yet: run it "
            "without --on, or without a budget"
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
    file: Annotated[Path, typer.Argument(help="The pipeline spec (YAML).", exists=True, dir_okay=False)],
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
    loaded = _load_spec(file)
    budget = BudgetFlags(budget_tokens, budget_cost, budget_calls, budget_seconds, prices)
    if on is not None:
        from orchestra.cli._temporal import run_on_temporal

        _no_budget_on_temporal(loaded, budget)

        answers = {
            b["interruptResponse"]["interruptId"]: b["interruptResponse"]["response"]
            for b in _parse_responses(respond)
        }
        run_on_temporal(
            file, loaded, on, None, session_id, storage, as_json, resume=True, responses=answers, force=force
        )
        return
    try:
        target = build(loaded, model=model, session_id=session_id, storage=storage)
        budget.apply(target)
    except (OrchestraError, ValueError) as exc:
        raise fail(str(exc)) from None
    if not isinstance(target, MultiAgentBase):
        raise fail(f"{file} is a single agent: there is no run to resume (use orchestra run --session-id)")
    task: Any = _parse_responses(respond) or None
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
def validate(
    file: Annotated[Path, typer.Argument(help="The pipeline spec (YAML).", exists=True, dir_okay=False)],
) -> None:
    """Check a spec and print every problem as file:line:column: field: message (exit 1 if any).

    Example: [bold]orchestra validate examples/graphs/fan_out.yaml[/]
    """
    loaded = _load_spec(file)
    out.print(f"{file}: valid {loaded.spec.kind} {loaded.spec.id!r}", highlight=False)


@app.command()
def graph(
    file: Annotated[Path, typer.Argument(help="The pipeline spec (YAML).", exists=True, dir_okay=False)],
    fmt: Annotated[str, typer.Option("--format", "-f", help="mermaid, dot or text.")] = "text",
) -> None:
    """Draw a pipeline as a mermaid flowchart, a Graphviz dot graph, or text.

    Example: [bold]orchestra graph examples/graphs/review_loop.yaml --format mermaid[/]
    """
    if fmt not in ("mermaid", "dot", "text"):
        raise typer.BadParameter("use mermaid, dot or text", param_hint="--format")
    loaded = _load_spec(file)
    target = build(loaded)
    if not isinstance(target, MultiAgentBase):
        raise fail(f"{file} is a single agent: there is no graph to draw")
    out.print(diagram(target, fmt), end="", markup=False, highlight=False)


@app.command()
def schema() -> None:
    """Print the JSON Schema of pipeline specs (version 1).

    Example: [bold]orchestra schema > pipeline.schema.json[/]
    """
    out.print_json(json.dumps(json_schema()))


@app.command()
def serve(
    config: Annotated[
        Path,
        typer.Argument(
            help="The server config (YAML): hosted specs, storage, API keys.", exists=True, dir_okay=False
        ),
    ],
    host: Annotated[str, typer.Option("--host", help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="The port to listen on.")] = 8000,
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="Server processes (they share the storage).")
    ] = 1,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            metavar="IPS",
            help="Behind a TLS proxy: the proxy addresses whose X-Forwarded-Proto/For are trusted (so the "
            "dashboard cookie is Secure), comma-separated, or '*'.",
        ),
    ] = None,
    otlp_endpoint: OtlpOption = None,
) -> None:
    """Host agents and pipelines over HTTP, with a dashboard at /.

    Example: [bold]orchestra serve server.yaml --port 8000 --workers 2[/]
    """
    import uvicorn

    from orchestra.server import CONFIG_ENV_VAR, load_config

    try:
        load_config(config)
    except OrchestraError as exc:
        raise fail(str(exc)) from None
    _start_tracing(otlp_endpoint, "orchestra-serve")  # the app factory configures each worker process
    os.environ[CONFIG_ENV_VAR] = str(config.resolve())
    err.print(f"serving {config} on http://{host}:{port} ({workers} worker(s))", highlight=False)
    uvicorn.run(
        "orchestra.server.app:create_app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        proxy_headers=forwarded_allow_ips is not None,
        forwarded_allow_ips=forwarded_allow_ips,
    )


def _stored_result(target: MultiAgentBase, uri: str, session_id: str, again: str) -> MultiAgentResult:
    """The result of the last run of ``target`` saved in a session, as the run returned it."""
    doc = _session_call(admin.load_scope, _storage(uri), session_id, "multiAgent", target.scope_id)
    target.load_document(doc.fields, doc.logs)
    if target.status == Status.EXECUTING:
        raise fail(
            f"the run of session {session_id} is still executing (or its process was killed): follow or "
            f"resume it with: {again}"
        )
    if isinstance(target, Graph):
        target._restore_results()
    outcome = target._build_result()
    if outcome.status == Status.COMPLETED and outcome.output is None and outcome.execution_order:
        # A swarm run on Temporal keeps its output in the last completed turn's result.
        last = outcome.results.get(outcome.execution_order[-1])
        outcome.output = last.output if last is not None else None
    return outcome


@app.command()
def result(
    file: Annotated[Path, typer.Argument(help="The pipeline spec (YAML).", exists=True, dir_okay=False)],
    session_id: Annotated[str, typer.Option("--session-id", metavar="ID", help="The session of the run.")],
    storage: StorageOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the outcome of a pipeline's last run in a session, running nothing: a run that finished on
    Temporal after you stopped following it, or any local one. Exit codes as for run.

    Example: [bold]orchestra result examples/graphs/review_loop.yaml --session-id demo --json[/]
    """
    loaded = _load_spec(file)
    target = build(loaded)
    if not isinstance(target, MultiAgentBase):
        raise fail(f"{file} is a single agent: its session is a conversation; see 'orchestra sessions show'")
    uri = storage or (loaded.spec.session.storage if loaded.spec.session else None) or DEFAULT_STORAGE_URI
    again = resume_command(file, session_id, storage=storage)
    outcome = _stored_result(target, uri, session_id, again)
    _report(outcome, session_id, again, as_json)


@app.command()
def worker(
    specs: Annotated[
        list[Path], typer.Argument(help="The pipeline specs this worker hosts.", exists=True, dir_okay=False)
    ],
    temporal: Annotated[str, typer.Option("--temporal", help="The Temporal frontend, HOST:PORT.")],
    task_queue: Annotated[str, typer.Option("--task-queue", help="The task queue to poll.")],
    namespace: Annotated[str, typer.Option("--namespace", help="The Temporal namespace.")] = "default",
    tls: Annotated[
        bool, typer.Option("--tls", envvar="ORCHESTRA_TEMPORAL_TLS", help="Connect with TLS.")
    ] = False,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert", envvar="ORCHESTRA_TEMPORAL_TLS_CERT", help="Client certificate (mTLS), PEM."
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(
            "--tls-key", envvar="ORCHESTRA_TEMPORAL_TLS_KEY", help="Client private key (mTLS), PEM."
        ),
    ] = None,
    tls_ca: Annotated[
        Path | None,
        typer.Option(
            "--tls-ca", envvar="ORCHESTRA_TEMPORAL_TLS_CA", help="The server's CA certificate, PEM."
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="ORCHESTRA_TEMPORAL_API_KEY", help="API key (Temporal Cloud)."),
    ] = None,
    graceful_shutdown: Annotated[
        float,
        typer.Option(
            "--graceful-shutdown",
            metavar="SECONDS",
            help="On SIGTERM, let running nodes finish for this long before exiting.",
        ),
    ] = 300.0,
    otlp_endpoint: OtlpOption = None,
) -> None:
    """Host pipelines on a Temporal task queue: run their workflows and their nodes as activities.

    For Temporal Cloud or any TLS cluster give --api-key, or --tls-cert and --tls-key (mTLS); the same
    settings come from ORCHESTRA_TEMPORAL_* variables, which 'run --on temporal://...' also reads.
    On SIGTERM (a deploy) the worker stops taking work and lets running nodes finish and commit.

    Example: [bold]orchestra worker --temporal 127.0.0.1:7233 --task-queue pipelines examples/graphs/*.yaml[/]
    """
    from orchestra.cli._temporal import run_worker

    _start_tracing(otlp_endpoint, "orchestra-worker")
    from orchestra.temporal import TemporalConnection

    connection = TemporalConnection(
        tls=tls,
        tls_cert=str(tls_cert) if tls_cert else None,
        tls_key=str(tls_key) if tls_key else None,
        tls_ca=str(tls_ca) if tls_ca else None,
        api_key=api_key,
    )
    run_worker(
        [_load_spec(spec) for spec in specs], temporal, namespace, task_queue, connection, graceful_shutdown
    )


@app.command("hash-key")
def hash_key_command(
    key: Annotated[str, typer.Argument(help="An API key to put in a server config.")],
) -> None:
    """Print the SHA-256 of an API key, as a server config's api_keys stores it.

    Example: [bold]orchestra hash-key "$(openssl rand -hex 24)"[/]
    """
    from orchestra.server import hash_key

    out.print(hash_key(key), highlight=False)


# -- sessions ------------------------------------------------------------------------------------------


def _storage(uri: str | None) -> Any:
    try:
        return storage_from_uri(uri or DEFAULT_STORAGE_URI)
    except OrchestraError as exc:
        raise fail(str(exc)) from None


def _scope(value: str | None, default_kind: str = "agent") -> tuple[Any, str]:
    if not value:
        return default_kind, "default"
    kind, sep, scope_id = value.partition("/")
    if not sep or kind not in ("agent", "multiAgent"):
        raise typer.BadParameter(
            "write agent/<agent_id> or multiAgent/<orchestrator_id>", param_hint="--scope"
        )
    return kind, scope_id


def _session_call(coro_fn: Any, *args: Any) -> Any:
    try:
        return anyio.run(coro_fn, *args)
    except (OrchestraError, ValueError) as exc:
        raise fail(str(exc)) from None


@sessions_app.command("list")
def sessions_list(storage: StorageOption = None, as_json: JsonOption = False) -> None:
    """List the sessions in a storage, with their scopes and when they were last saved.

    Example: [bold]orchestra sessions list --storage file:./.orchestra[/]
    """
    infos = _session_call(admin.list_sessions, _storage(storage))
    if as_json:
        out.print_json(
            json.dumps(
                [
                    {
                        "session_id": i.session_id,
                        "layout": i.layout,
                        "updated_at": i.updated_at.isoformat() if i.updated_at else None,
                        "scopes": [f"{s.kind}/{s.scope_id}" for s in i.scopes],
                    }
                    for i in infos
                ]
            )
        )
        return
    table = Table("session", "layout", "scopes", "updated")
    for info in infos:
        updated = info.updated_at.strftime("%Y-%m-%d %H:%M:%S") if info.updated_at else "-"
        scopes = ", ".join(f"{s.kind}/{s.scope_id}" for s in info.scopes)
        table.add_row(info.session_id, info.layout, scopes, updated)
    out.print(table)


@sessions_app.command("show")
def sessions_show(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    storage: StorageOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session's scopes: run status and node statuses, or message counts.

    Example: [bold]orchestra sessions show run-20261130-101500-ab12[/]
    """
    store = _storage(storage)
    info = _session_call(admin.describe_session, store, session_id)
    _mark_dead_runs(info, WriterLock.inspect(store, session_id))
    if as_json:
        out.print_json(
            json.dumps(
                [{"kind": s.kind, "id": s.scope_id, "records": s.records, **s.summary} for s in info.scopes],
                default=str,
            )
        )
        return
    for scope in info.scopes:
        out.print(f"[bold]{scope.kind}/{scope.scope_id}[/]  ({scope.records} saves)", highlight=False)
        summary = dict(scope.summary)
        nodes = summary.pop("nodes", None)
        for key, value in summary.items():
            out.print(f"  {key}: {value}", highlight=False, markup=False)
        if nodes:
            table = Table("node", "status")
            for node_id, status in nodes.items():
                table.add_row(node_id, str(status))
            out.print(table)


def _mark_dead_runs(info: admin.SessionInfo, writer: Any) -> None:
    """A run saved as executing whose writer died (the local-file lock can tell) is shown as such."""
    if writer is None:
        return
    for scope in info.scopes:
        if scope.summary.get("status") != Status.EXECUTING.value:
            continue
        if writer.alive:
            scope.summary["status"] = f"executing (process {writer.pid} on {writer.host})"
            continue
        scope.summary["status"] = f"interrupted? (no live writer since {writer.started_at})"
        nodes = scope.summary.get("nodes") or {}
        for node_id, status in nodes.items():
            if status == Status.EXECUTING.value:
                nodes[node_id] = "interrupted"


@sessions_app.command("history")
def sessions_history(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    scope: Annotated[
        str | None, typer.Option("--scope", help="agent/<id> or multiAgent/<id> (default agent/default).")
    ] = None,
    storage: StorageOption = None,
    as_json: JsonOption = False,
) -> None:
    """List a scope's immutable snapshots, oldest first (full ids, ready to paste into restore).

    Example: [bold]orchestra sessions history user-123 --scope agent/default[/]
    """
    kind, scope_id = _scope(scope)
    snapshots = _session_call(admin.scope_history, _storage(storage), session_id, kind, scope_id)
    if as_json:
        out.print_json(
            json.dumps(
                [
                    {
                        "snapshot_id": s.snapshot_id,
                        "created_at": s.created_at,
                        "journal_seq": s.journal_seq,
                        "app_data": s.app_data,
                    }
                    for s in snapshots
                ],
                default=str,
            )
        )
        return
    table = Table("created", "journal record", "app data", "snapshot id")
    table.columns[3].no_wrap = True
    table.columns[3].min_width = 36
    for snap in snapshots:
        table.add_row(
            str(snap.created_at), str(snap.journal_seq), json.dumps(snap.app_data), snap.snapshot_id
        )
    out.print(table)


@sessions_app.command("restore")
def sessions_restore(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    snapshot_id: Annotated[str, typer.Argument(help="The immutable snapshot to go back to.")],
    scope: Annotated[
        str | None, typer.Option("--scope", help="agent/<id> or multiAgent/<id> (default agent/default).")
    ] = None,
    storage: StorageOption = None,
) -> None:
    """Make an immutable snapshot the latest state of its scope.

    Example: [bold]orchestra sessions restore user-123 01a22a0a-1aa2-7000-b755-51e3343ca1a8[/]
    """
    kind, scope_id = _scope(scope)
    _session_call(admin.restore_scope, _storage(storage), session_id, kind, scope_id, snapshot_id)
    out.print(f"{kind}/{scope_id} of {session_id} is back at snapshot {snapshot_id}", highlight=False)


@sessions_app.command("export")
def sessions_export(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    scope: Annotated[
        str | None, typer.Option("--scope", help="agent/<id> or multiAgent/<id> (default agent/default).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file (default: stdout).")
    ] = None,
    storage: StorageOption = None,
) -> None:
    """Export a scope as one self-contained snapshot file (JSON); 'sessions import' reads it back.

    A session of the repository layout (FileSessionManager, S3SessionManager, or Strands Agents' own) is
    exported the same way, so export then import moves it to the snapshot layout.

    Example: [bold]orchestra sessions export user-123 --scope multiAgent/review-loop -o run.json[/]
    """
    kind, scope_id = _scope(scope)
    data = _session_call(admin.export_any_scope, _storage(storage), session_id, kind, scope_id)
    if output is None:
        sys.stdout.write(data.decode() + "\n")
    else:
        output.write_bytes(data)
        err.print(f"wrote {output} ({len(data)} bytes)", highlight=False)


@sessions_app.command("prune-snapshots")
def sessions_prune_snapshots(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    keep: Annotated[
        int | None, typer.Option("--keep-snapshots", metavar="N", min=0, help="Keep the newest N per scope.")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", metavar="AGE", help="Delete those older than 30m, 12h, 7d, 2w."),
    ] = None,
    storage: StorageOption = None,
) -> None:
    """Delete a session's immutable snapshots (every scope): all but the newest N, or those older than AGE.

    Example: [bold]orchestra sessions prune-snapshots user-123 --keep-snapshots 3[/]
    """
    if keep is None and older_than is None:
        raise typer.BadParameter(
            "give --keep-snapshots N, --older-than AGE, or both", param_hint="--keep-snapshots"
        )
    age = _duration(older_than) if older_than is not None else None
    store = _storage(storage)
    info = _session_call(admin.describe_session, store, session_id)
    if info.layout == "repository":
        raise fail(f"session {session_id} uses the repository layout, which keeps no immutable snapshots")
    from orchestra.session._journal import Journal
    from orchestra.session._layout import ScopeLayout

    total = 0
    for scope in info.scopes:
        journal = Journal(store, ScopeLayout(session_id, scope.kind, scope.scope_id))
        deleted = _session_call(lambda j=journal: j.prune_checkpoints(keep=keep, older_than=age))
        total += len(deleted)
    out.print(f"deleted {total} immutable snapshot(s) of session {session_id}", highlight=False)


@sessions_app.command("compact")
def sessions_compact(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    keep: Annotated[
        int | None,
        typer.Option(
            "--keep-snapshots", metavar="N", min=0, help="Also keep only the newest N snapshots per scope."
        ),
    ] = None,
    min_age: Annotated[
        str,
        typer.Option(
            "--min-age",
            metavar="AGE",
            help="Delete only records older than this (at least the writers' Compaction.delete_after).",
        ),
    ] = "10m",
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Allow a --min-age below the writers' delete_after: a writer idle since then would save "
            "into a folded journal and its turn would be lost. Only when no writer is running.",
        ),
    ] = False,
    storage: StorageOption = None,
) -> None:
    """Fold a session's journal into its snapshots and delete the records no snapshot needs (every scope).

    Safe while the session is in use: the newest record stays, and a writer that fell behind is refused
    at its next save. Immutable snapshots keep the records after them: prune them with --keep-snapshots.

    Example: [bold]orchestra sessions compact user-123 --keep-snapshots 3[/]
    """
    from orchestra.session import Compaction
    from orchestra.session._journal import Journal, writers_delete_after
    from orchestra.session._layout import ScopeLayout

    age = _duration(min_age, "--min-age")
    store = _storage(storage)
    info = _session_call(admin.describe_session, store, session_id)
    if info.layout == "repository":
        raise fail(f"session {session_id} uses the repository layout, which has no journal to compact")

    async def compact(kind: Any, scope_id: str) -> int:
        journal = Journal(store, ScopeLayout(session_id, kind, scope_id), Compaction(delete_after=age))
        await journal.load()
        await journal.compact()
        if keep is not None:
            await journal.prune_checkpoints(keep=keep)
        return await journal.fold()

    for scope in info.scopes:
        layout = ScopeLayout(session_id, scope.kind, scope.scope_id)
        writers = _session_call(writers_delete_after, store, layout)
        if age < writers and not force:
            raise fail(
                f"--min-age {min_age} is below the {writers} after which the writers of "
                f"{scope.kind}/{scope.scope_id} check that their last journal record is still there: a writer "
                "idle since then would save into the folded journal and its turn would be lost. Give a "
                "larger --min-age, or --force when no writer is running"
            )
    for scope in info.scopes:
        deleted = _session_call(compact, scope.kind, scope.scope_id)
        out.print(f"{scope.kind}/{scope.scope_id}: deleted {deleted} journal record(s)", highlight=False)


@sessions_app.command("fork")
def sessions_fork(
    session_id: Annotated[str, typer.Argument(help="The session to fork.")],
    snapshot_id: Annotated[
        str | None, typer.Argument(help="The immutable snapshot to fork from (default: the latest state).")
    ] = None,
    to: Annotated[str, typer.Option("--to", help="The new session's id.")] = "",
    scope: Annotated[
        str | None, typer.Option("--scope", help="multiAgent/<id> or agent/<id> (default agent/default).")
    ] = None,
    storage: StorageOption = None,
) -> None:
    """Copy a run (at a snapshot) into a new session, to continue it differently; the original stays.

    Example: [bold]orchestra sessions fork run-1 01a22a0a-1aa2-7000-b755-51e3343ca1a8 --scope multiAgent/review-loop --to run-1-b[/]
    """
    if not to:
        raise typer.BadParameter("name the new session", param_hint="--to")
    from orchestra.session.transfer import fork_scope

    kind, scope_id = _scope(scope)
    copied = _session_call(fork_scope, _storage(storage), session_id, kind, scope_id, to, snapshot_id)
    out.print(f"forked {', '.join(copied)} of {session_id} into {to}", highlight=False)


@sessions_app.command("import")
def sessions_import(
    file: Annotated[
        Path,
        typer.Argument(
            help="A file written by 'sessions export', or with --from strands a Strands Agents agent snapshot.",
            exists=True,
            dir_okay=False,
        ),
    ],
    session_id: Annotated[
        str | None, typer.Option("--session-id", help="Import into this session (default: the exported one).")
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            "--from", metavar="FORMAT", help="orchestra (an export) or strands (a Strands snapshot)."
        ),
    ] = "orchestra",
    agent_id: Annotated[
        str | None,
        typer.Option("--agent-id", help="With --from strands: the agent (default: from the file's path)."),
    ] = None,
    storage: StorageOption = None,
) -> None:
    """Store an exported scope in a session; 'orchestra resume' then continues the run from it.

    With --from strands, FILE is a Strands Agents SnapshotSessionManager file
    (session/<id>/scopes/agent/<agent>/snapshots/snapshot_latest.json): its agent becomes an orchestra agent
    of the snapshot layout, messages, state and conversation manager state included.

    Example: [bold]orchestra sessions import run.json --session-id run-1-copy[/]
    """
    from orchestra.session.transfer import import_scope, import_strands_snapshot, strands_snapshot_ids

    if source == "strands":
        path_session, path_agent = strands_snapshot_ids(str(file.absolute()))
        target_session, target_agent = session_id or path_session, agent_id or path_agent or "default"
        if target_session is None:
            raise typer.BadParameter("the file's path names no session: pass one", param_hint="--session-id")
        imported = _session_call(
            import_strands_snapshot,
            _storage(storage),
            file.read_bytes(),
            str(file),
            target_session,
            target_agent,
        )
    elif source == "orchestra":
        imported = _session_call(import_scope, _storage(storage), file.read_bytes(), session_id)
    else:
        raise typer.BadParameter("write orchestra or strands", param_hint="--from")
    target, kind, scope_id = imported
    out.print(f"imported {kind}/{scope_id} into session {target}", highlight=False)


@sessions_app.command("delete")
def sessions_delete(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    storage: StorageOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Delete even if it was saved in the last 10 minutes.")
    ] = False,
) -> None:
    """Delete every key of a session (either layout).

    A session saved in the last 10 minutes may have a live writer; it is kept unless --force (a run of
    'orchestra run' on local files is known to be dead or alive, and only a live one is refused).

    Example: [bold]orchestra sessions delete user-123 --yes[/]
    """
    store = _storage(storage)
    writer = WriterLock.inspect(store, session_id)
    if writer is not None and writer.alive:
        raise fail(
            f"session {session_id} is being run by process {writer.pid} on {writer.host}: deleting it now "
            "would leave a session its run cannot save to. Stop the run first"
        )
    known = [i for i in _session_call(admin.list_sessions, store) if i.session_id == session_id]
    if not force and known and admin.may_have_live_writer(store, known[0]):
        raise fail(
            f"session {session_id} was saved less than 10 minutes ago and may still have a live writer, "
            "which could recreate part of it after the delete. Stop the writer and pass --force, or wait"
        )
    if not yes and not typer.confirm(f"Delete session {session_id}?"):
        raise typer.Exit(EXIT_FAILED)
    count = _session_call(admin.delete_session, store, session_id)
    out.print(f"deleted {count} keys of session {session_id}", highlight=False)


_DURATION = re.compile(r"^(\d+)([smhdw])$")


def _duration(text: str, option: str = "--older-than") -> timedelta:
    match = _DURATION.match(text.strip())
    if not match:
        raise typer.BadParameter("write a number and a unit: 0s, 30m, 12h, 7d, 2w", param_hint=option)
    number, unit = int(match.group(1)), match.group(2)
    return timedelta(
        **{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[unit]: number}
    )


@sessions_app.command("prune")
def sessions_prune(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Delete sessions not saved for this long: 30m, 12h, 7d, 2w.")
    ],
    storage: StorageOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be deleted.")] = False,
) -> None:
    """Delete the sessions that were not saved for a while.

    Example: [bold]orchestra sessions prune --older-than 7d --dry-run[/]
    """
    prune = functools.partial(admin.prune_sessions, dry_run=dry_run)
    doomed = _session_call(prune, _storage(storage), _duration(older_than))
    verb = "would delete" if dry_run else "deleted"
    out.print(
        f"{verb} {len(doomed)} session(s)" + (": " + ", ".join(doomed) if doomed else ""), highlight=False
    )


def main() -> None:
    """The console entry point: an unexpected error is one line and a hint (``--debug`` shows more)."""
    debug = "--debug" in sys.argv[1:]
    if debug:
        sys.argv.remove("--debug")
    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C before a run started (while loading, importing, connecting)
        err.print("interrupted before the run started; nothing was saved", highlight=False)
        sys.exit(EXIT_SIGNAL[int(signal.SIGINT)])
    except Exception as exc:
        if debug:
            raise
        fail(f"{type(exc).__name__}: {exc}")
        err.print("Run the same command with --debug to see the traceback.", highlight=False)
        sys.exit(EXIT_FAILED)
