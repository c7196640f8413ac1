"""``orchestra worker``: host pipelines on a Temporal task queue (their workflows, and their nodes as
activities) until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestra.cli._options import (
    OtlpOption,
    TemporalApiKey,
    TemporalTls,
    TemporalTlsCa,
    TemporalTlsCert,
    TemporalTlsKey,
    load_spec,
    start_tracing,
)
from orchestra.cli._output import err, fail
from orchestra.errors import OrchestraError
from orchestra.spec import LoadedSpec

__all__ = ["app", "run_worker"]

app = typer.Typer()


@app.command()
def worker(
    specs: Annotated[
        list[Path], typer.Argument(help="The pipeline specs this worker hosts.", exists=True, dir_okay=False)
    ],
    temporal: Annotated[str, typer.Option("--temporal", help="The Temporal frontend, HOST:PORT.")],
    task_queue: Annotated[str, typer.Option("--task-queue", help="The task queue to poll.")],
    namespace: Annotated[str, typer.Option("--namespace", help="The Temporal namespace.")] = "default",
    tls: TemporalTls = False,
    tls_cert: TemporalTlsCert = None,
    tls_key: TemporalTlsKey = None,
    tls_ca: TemporalTlsCa = None,
    api_key: TemporalApiKey = None,
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
    start_tracing(otlp_endpoint, "orchestra-worker")
    from orchestra.temporal import TemporalConnection

    connection = TemporalConnection(
        tls=tls,
        tls_cert=str(tls_cert) if tls_cert else None,
        tls_key=str(tls_key) if tls_key else None,
        tls_ca=str(tls_ca) if tls_ca else None,
        api_key=api_key,
    )
    run_worker(
        [load_spec(spec) for spec in specs], temporal, namespace, task_queue, connection, graceful_shutdown
    )


def run_worker(
    specs: list[LoadedSpec],
    address: str,
    namespace: str,
    task_queue: str,
    connection: Any = None,
    graceful_shutdown: float | None = None,
) -> None:
    """Host ``specs`` on a Temporal task queue until SIGINT or SIGTERM; then let running nodes finish and
    commit (up to ``graceful_shutdown`` seconds) before exiting."""
    from datetime import timedelta

    from orchestra.cli._temporal import core_logs_to_logging, temporal_failure  # only for this command
    from orchestra.temporal import TemporalTarget, connect, create_worker

    core_logs_to_logging()

    async def main() -> None:
        client = await connect(TemporalTarget(address, namespace, task_queue), connection)
        options = (
            {}
            if graceful_shutdown is None
            else {"graceful_shutdown_timeout": timedelta(seconds=graceful_shutdown)}
        )
        worker = create_worker(client, task_queue, specs, **options)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with worker:
            names = ", ".join(s.spec.id for s in specs)
            err.print(
                f"worker ready on {address}/{namespace}, task queue {task_queue}: {names}", highlight=False
            )
            await stop.wait()

    try:
        asyncio.run(main())
    except OrchestraError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # cannot connect, or the server refused
        raise fail(temporal_failure(exc, address, "orchestra worker ...")) from None
