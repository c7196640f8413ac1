"""The ``orchestra`` command's root: its global options (--log-format, -v, --version), the logging setup,
and one line per command group (each in a module of its own); ``main`` is the console entry point.

Exit codes: 0 the run completed (or the command succeeded); 1 the run failed, the spec is invalid, or
the command could not do what was asked; 2 the command line was wrong; 3 the run stopped for a human
(an interrupt waiting for a response); 4 the run spent its budget (resume it with a larger one); 130
stopped by Ctrl-C (SIGINT) and 143 by SIGTERM: the run is saved as interrupted and the exact command
that resumes it is printed.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Annotated, Any

import structlog
import typer

from orchestra.cli import _audit, _run, _serve, _spec, _worker
from orchestra.cli._memory import memory_app
from orchestra.cli._output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SIGNAL,
    err,
    fail,
    out,
    use_log_format,
)
from orchestra.cli._runs import runs_app
from orchestra.cli._schedules import schedules_app
from orchestra.cli._sessions import sessions_app

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "app", "main"]

app = typer.Typer(
    name="orchestra",
    help="Run multi-agent pipelines that never lose their progress.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,  # main() turns unexpected errors into one line (--debug for more)
)
app.add_typer(_run.app)  # run, resume, result
app.add_typer(_spec.app)  # validate, graph, schema
app.add_typer(_serve.app)  # serve, hash-key
app.add_typer(_worker.app)  # worker
app.add_typer(_audit.app)  # audit (a server's audit log)
app.add_typer(sessions_app, name="sessions")
app.add_typer(runs_app, name="runs")  # orchestra runs list/show/cancel/stream --url (cli/_runs.py)
app.add_typer(schedules_app, name="schedules")  # list/pause/resume/run-now (cli/_schedules.py)
app.add_typer(memory_app, name="memory")  # orchestra memory list/search/get/forget --storage (cli/_memory.py)


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


def _print_version(value: bool) -> None:
    if value:
        from orchestra import __version__
        from orchestra._dist import DISTRIBUTION, installed_version

        out.print(f"{DISTRIBUTION} {installed_version(__version__)}", highlight=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    ctx: typer.Context,
    log_format: Annotated[
        str, typer.Option("--log-format", help="console or json log lines on stderr.")
    ] = "console",
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="More logs: -v info, -vv debug.")
    ] = 0,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the installed version (orchestra-agents) and exit.",
        ),
    ] = False,
) -> None:
    """Run multi-agent pipelines that never lose their progress.

    Example: [bold]orchestra run examples/graphs/review_loop.yaml[/]
    """
    if log_format not in ("console", "json"):
        raise typer.BadParameter("use console or json", param_hint="--log-format")
    _configure_logging(ctx, log_format, verbose)
    use_log_format(ctx, log_format)


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
