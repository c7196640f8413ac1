"""What every command shares: the consoles, the exit codes, one-line failures and resume hints."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import click
import typer
from rich.console import Console
from rich.text import Text

__all__ = [
    "EXIT_BUDGET",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SIGNAL",
    "EXIT_USAGE",
    "err",
    "fail",
    "live_display",
    "out",
    "resume_command",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 3
EXIT_BUDGET = 4  # the run spent its budget: resume it with a larger one
EXIT_SIGNAL: dict[int, int] = {int(signal.SIGINT): 130, int(signal.SIGTERM): 143}

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    """Print ``error: message`` on stderr; raise the returned ``typer.Exit`` to end with ``code``."""
    err.print(Text.assemble(("error:", "red"), " ", message), highlight=False)
    return typer.Exit(code)


def live_display() -> bool:
    """Whether a live table may be drawn on stderr: only on a terminal, and not beside JSON log lines
    (without a terminal the redraws would pile up, and a JSON stream must hold nothing but JSON)."""
    context = click.get_current_context(silent=True)
    json_logs = context is not None and context.find_root().params.get("log_format") == "json"
    return err.is_terminal and not json_logs


def resume_command(
    file: Path,
    session_id: str,
    *,
    storage: str | None = None,
    model: str | None = None,
    on: str | None = None,
    extra: list[str] | None = None,
    verb: str = "resume",
) -> str:
    """The command that resumes a run, repeating every option that changes how it runs (``extra``: more
    words, such as the budget flags); with ``verb`` another command on the same run (result, run)."""
    parts = ["orchestra", verb, str(file), "--session-id", session_id]
    for option, value in (("--storage", storage), ("--model", model), ("--on", on)):
        if value:
            parts += [option, value]
    return shlex.join([*parts, *(extra or [])])
