"""``orchestra audit``: read a server's audit log from its storage (who created, deleted, answered,
cancelled or resumed what, and when), filtered."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from orchestra._sync import run_sync
from orchestra.cli._output import fail, out
from orchestra.errors import OrchestraError

__all__ = ["app"]

app = typer.Typer()


def _time(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise fail(
            f"{option} {value!r} is not an ISO 8601 time (e.g. 2026-12-01 or 2026-12-01T08:00:00Z)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@app.command()
def audit(
    config: Annotated[
        Path, typer.Argument(help="The server config (YAML): its storage holds the log.", exists=True)
    ],
    workspace: Annotated[str, typer.Option("--workspace", "-w", help="The workspace whose log to read.")],
    user: Annotated[str | None, typer.Option("--user", help="Only this user's entries.")] = None,
    action: Annotated[
        str | None, typer.Option("--action", help="Only this action (run.create, session.delete, ...).")
    ] = None,
    since: Annotated[str | None, typer.Option("--since", help="From this time (ISO 8601, UTC).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Before this time (ISO 8601, UTC).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many entries.")] = 100,
) -> None:
    """Print a workspace's audit log, oldest first, one JSON object a line."""
    from orchestra.hosting.audit import AuditLog
    from orchestra.hosting.config import load_config
    from orchestra.storage import PrefixedStorage, storage_from_uri

    try:
        loaded = load_config(config)
        storage = PrefixedStorage(storage_from_uri(loaded.storage), f"ws/{workspace}")
        entries = run_sync(
            AuditLog(storage).entries,
            since=_time(since, "--since"),
            until=_time(until, "--until"),
            user=user,
            action=action,
            limit=limit,
        )
    except OrchestraError as exc:
        raise fail(str(exc)) from None
    for entry in entries:
        out.print(json.dumps(entry), markup=False, highlight=False, soft_wrap=True)
