"""What every command shares: the consoles, the exit codes, one-line failures and resume hints."""

from __future__ import annotations

import io
import json
import shlex
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = [
    "EXIT_BUDGET",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SIGNAL",
    "EXIT_USAGE",
    "EXIT_WAITING",
    "err",
    "fail",
    "json_logs",
    "live_display",
    "out",
    "print_table",
    "resume_command",
    "use_log_format",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 3
EXIT_BUDGET = 4  # the run spent its budget: resume it with a larger one
EXIT_WAITING = 5  # the run waits for a time or an event (docs/waiting.md)
EXIT_SIGNAL: dict[int, int] = {int(signal.SIGINT): 130, int(signal.SIGTERM): 143}


_log_format = ["console"]  # this command's --log-format: set by the root callback, put back when it ends


def use_log_format(ctx: typer.Context, log_format: str) -> None:
    """Make ``log_format`` this command's (until the command ends)."""
    previous = _log_format[0]
    _log_format[0] = log_format
    ctx.call_on_close(lambda: _log_format.__setitem__(0, previous))


def json_logs() -> bool:
    """Whether this command's stderr is a JSON stream (``--log-format json``)."""
    return _log_format[0] == "json"


class _Stderr(Console):
    """stderr for people; under ``--log-format json`` each line printed here goes out as one JSON record
    (event, level, timestamp: the log lines' own shape), so the stream holds nothing but JSON."""

    def print(self, *objects: Any, **options: Any) -> None:
        if not json_logs():
            super().print(*objects, **options)
            return
        plain = Console(file=io.StringIO(), color_system=None, soft_wrap=True, width=10_000)
        plain.print(*objects, **options)
        for line in plain.file.getvalue().splitlines():  # type: ignore[attr-defined]
            if line.strip():
                level = "error" if line.startswith("error:") else "info"
                record = {"event": line, "level": level, "timestamp": datetime.now(UTC).isoformat()}
                sys.stderr.write(json.dumps(record) + "\n")


out = Console(soft_wrap=True)
err = _Stderr(stderr=True, soft_wrap=True)


def print_table(table: Table) -> None:
    """Print ``table`` on stdout with nothing cut, so that every id pastes back: a table wider than the
    terminal (or ``COLUMNS``, or 80 when piped) is drawn at its own width, one line per row, rather than
    squeezed into wrapped and shortened cells (the terminal wraps the long lines)."""
    needed = Measurement.get(out, out.options.update(width=100_000), table).maximum
    if needed <= out.width:
        out.print(table)
        return
    wide = Console(
        file=out.file,
        width=needed,
        color_system=out.color_system,  # type: ignore[arg-type]  # the same names Console takes
        force_terminal=out.is_terminal,
        no_color=out.no_color,
    )
    wide.print(table)


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    """Print ``error: message`` on stderr; raise the returned ``typer.Exit`` to end with ``code``."""
    err.print(Text.assemble(("error:", "red"), " ", message), highlight=False)
    return typer.Exit(code)


def live_display() -> bool:
    """Whether a live table may be drawn on stderr: only on a terminal, and not beside JSON log lines
    (without a terminal the redraws would pile up, and a JSON stream must hold nothing but JSON)."""
    return err.is_terminal and not json_logs()


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
