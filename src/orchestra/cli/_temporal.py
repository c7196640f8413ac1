"""``orchestra run/resume --on temporal://...``: start or continue a run on Temporal and follow it like a
local run (``orchestra worker`` is in ``_worker.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import signal
from pathlib import Path
from typing import Any

import typer
from rich.live import Live

from orchestra.cli._outcome import report, respond_to, resume_problem, stored_result
from orchestra.cli._output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_SIGNAL,
    EXIT_WAITING,
    err,
    fail,
    live_display,
    resume_command,
)
from orchestra.cli._render import NodeTable
from orchestra.cli._waits import waits_here, waits_of
from orchestra.errors import OrchestraError
from orchestra.multiagent import MultiAgentBase
from orchestra.spec import LoadedSpec, build
from orchestra.storage import parse_storage_uri

__all__ = ["core_logs_to_logging", "run_on_temporal", "temporal_failure"]

CORE_LOGGER = "orchestra.temporal.core"


def core_logs_to_logging() -> Any:
    """Send the Temporal core's own log lines (connection retries, "retried N times") to the Python
    logger ``orchestra.temporal.core``, which the CLI writes to stderr in its log format: by default the
    core prints them to stdout, where they would mix with ``--json``. Returns the telemetry config; a
    default runtime made earlier (by the caller's own code) is kept."""
    import logging

    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    telemetry = TelemetryConfig(
        logging=LoggingConfig(
            filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
            forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
        )
    )
    with contextlib.suppress(RuntimeError):  # a default runtime already exists: it stays
        Runtime.set_default(Runtime(telemetry=telemetry), error_if_already_set=True)
    return telemetry


def _shared_storage(uri: str | None, loaded: LoadedSpec) -> str:
    """Workers read and write the run through storage they all reach: an absolute folder, or S3."""
    uri = uri or (loaded.spec.session.storage if loaded.spec.session else "file:./.orchestra")
    kind, parts = parse_storage_uri(uri)
    if kind == "memory":
        raise fail(
            "a Temporal run needs storage its workers share: use file:/shared/dir or s3://bucket/prefix"
        )
    if kind == "file":
        return "file:" + str(Path(parts["root"]).resolve())
    return uri


def temporal_failure(exc: Exception, address: str, again: str) -> str:
    """One line for what Temporal (or the way to it) answered, with what to do."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError
    from temporalio.service import RPCError

    if isinstance(exc, WorkflowFailureError):
        cause: BaseException = exc
        while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
            cause = cause.__cause__  # the workflow's failure wraps the activity's, which says why
        return f"the run failed on Temporal: {str(cause).splitlines()[0]}"
    if isinstance(exc, RPCError):
        return (
            f"Temporal at {address} refused the request: {exc.message} ({exc.status.name}). The run, if it "
            f"started, goes on; follow it with: {again}"
        )
    if isinstance(exc, RuntimeError) and "connect" in str(exc).lower():
        return (
            f"cannot reach Temporal at {address} ({str(exc).splitlines()[0]}): is the server up, and are "
            "--tls/--api-key (ORCHESTRA_TEMPORAL_*) right for it?"
        )
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no message'} (on {address})"


async def _saved_outputs(uri: str, session_id: str, scope_id: str) -> dict[str, Any]:
    """Each node's latest output as saved in the session so far (for the live table)."""
    from orchestra.session.admin import load_scope
    from orchestra.storage import storage_from_uri

    try:
        doc = await load_scope(storage_from_uri(uri), session_id, "multiAgent", scope_id)
    except OrchestraError:  # not saved yet, or being compacted: the next poll shows it
        return {}
    return {
        name[len("node/") :]: record["result"].get("output")
        for name, record in doc.fields.items()
        if name.startswith("node/") and isinstance(record, dict) and record.get("result")
    }


def run_on_temporal(
    file: Path,
    loaded: LoadedSpec,
    on: str,
    task: Any,
    session_id: str,
    storage: str | None,
    as_json: bool,
    *,
    resume: bool,
    responses: dict[str, Any],
    force: bool = False,
    connection: Any = None,
    budget: Any = None,
) -> None:
    """Start (or continue) a run on Temporal and follow it like a local run (``budget``: the budget
    flags, ``BudgetFlags``: the run's budget in place of the spec's, enforced by the workflow)."""
    from orchestra.temporal import (
        RunRequest,
        connect,
        parse_target,
        running_handle,
        spec_hash,
        start_run,
    )
    from orchestra.temporal.workflow import PipelineWorkflow

    try:
        target = parse_target(on)
    except OrchestraError as exc:
        raise fail(str(exc)) from None
    core_logs_to_logging()
    uri = _shared_storage(storage, loaded)
    spec_id = loaded.spec.id
    skeleton = build(loaded)
    if not isinstance(skeleton, MultiAgentBase):
        raise fail(f"{file} is a single agent: Temporal runs graphs and swarms")
    run_budget = None
    if budget is not None and budget.given():
        try:
            budget.apply(skeleton)
        except OrchestraError as exc:
            raise fail(str(exc)) from None
        run_budget = skeleton.budget.to_json() if skeleton.budget is not None else None
    table = NodeTable(skeleton)
    again = resume_command(file, session_id, storage=storage, on=on)

    async def follow() -> tuple[str, Any]:
        client = await connect(target, connection)
        handle = await running_handle(client, spec_id, session_id)
        if handle is not None:
            if responses:
                await handle.signal(PipelineWorkflow.respond, responses)
            elif not resume:
                raise fail(f"a run of session {session_id} is already going on Temporal; follow it: {again}")
        else:
            problem = (
                await resume_problem(skeleton, file, uri, session_id, storage=storage, on=on)
                if resume
                else None
            )
            if problem is not None:
                raise fail(problem)
            request = RunRequest(
                spec_id=spec_id,
                spec_hash=spec_hash(loaded),
                session_id=session_id,
                storage=uri,
                task=task,
                run_id=secrets.token_hex(8),
                resume=resume,
                force=force,
                responses=responses,
                budget=run_budget,
            )
            handle = await start_run(client, target, request)
        outcome = asyncio.ensure_future(handle.result())
        shown: set[str] = set()
        outputs: dict[str, Any] = {}
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            received.append(signum)
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        show_table = not as_json and live_display()
        live = Live(console=err, refresh_per_second=8, get_renderable=table.render) if show_table else None
        drawn.append(live is not None)
        with live if live is not None else contextlib.nullcontext():
            while True:
                done, _ = await asyncio.wait({outcome}, timeout=0.25)
                progress = await handle.query(PipelineWorkflow.progress)
                finished = {n for n, status in progress["nodes"].items() if status in ("completed", "failed")}
                if finished != shown and not as_json:  # outputs are in the session, not in the workflow
                    outputs.update(await _saved_outputs(uri, session_id, skeleton.scope_id))
                    shown.clear()
                    shown.update(finished)
                table.set_progress(progress, outputs)
                if done:
                    return "finished", outcome.result()
                if progress["status"] == "interrupted" and responses == {} and not stop.is_set():
                    waits = waits_of(progress.get("interrupts", []))
                    if waits is not None and waits_here(waits):
                        continue  # the workflow's timer ends it soon: follow on
                    outcome.cancel()
                    return ("waiting" if waits is not None else "interrupted"), progress
                if stop.is_set():
                    outcome.cancel()
                    return "signal", progress
                if progress["status"] == "interrupted" and responses:
                    responses.clear()  # the answers went in; the next interrupt is a new question

    received: list[int] = []
    drawn: list[bool] = []
    try:
        try:
            kind, data = asyncio.run(follow())
        finally:
            if any(drawn):
                err.print()  # what follows starts on a line of its own, after the table
    except typer.Exit:  # refused with its own line
        raise
    except OrchestraError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        raise fail(temporal_failure(exc, target.address, again)) from None
    if kind == "signal":
        err.print("Stopped following. The run goes on on Temporal; follow it again with:")
        err.print(f"  {again}", markup=False, highlight=False)
        raise typer.Exit(EXIT_SIGNAL.get(received[0] if received else signal.SIGINT, EXIT_FAILED))
    if kind == "waiting":
        waits = waits_of(data.get("interrupts", [])) or []
        err.print("[cyan]waiting[/]: the run waits on Temporal (a workflow timer, or the send_event signal):")
        for wait in waits:
            err.print(f"  {wait.interrupt_id}  {wait.describe()}", markup=False, highlight=False)
        err.print(f"It goes on by itself; follow it again with: {again}", markup=False, highlight=False)
        raise typer.Exit(EXIT_WAITING)
    if kind == "interrupted":
        err.print("[magenta]interrupted[/]: waiting for a response to:")
        for interrupt in data.get("interrupts", []):
            err.print(
                f"  {interrupt['id']}  {interrupt['name']}: {json.dumps(interrupt.get('reason'))}",
                markup=False,
                highlight=False,
            )
        ids = [interrupt["id"] for interrupt in data.get("interrupts", [])]
        err.print(f"Answer with: {again} --respond {respond_to(ids)}", markup=False, highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    # The outcome as a local run reports it (text, --json shape, exit code), read from the session.
    if data["status"] == "failed" and data.get("execution_count") is None:
        # The workflow refused before running anything (no run to resume, another graph): say why.
        raise fail(str(data.get("reason")))
    fresh = build(loaded)  # the followed skeleton only knows statuses; this one loads the results
    assert isinstance(fresh, MultiAgentBase)
    report(stored_result(fresh, uri, session_id, again), session_id, again, as_json)
