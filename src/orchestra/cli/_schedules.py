"""``orchestra schedules ...``: the scheduled runs of an ``orchestra serve`` server (list, pause, resume,
run-now). Against the server (``--url`` or ``ORCHESTRA_URL``, the key ``--api-key``), or, for list,
pause and resume, straight against its storage (``--config server.yaml``: no server needs to run).

Exit codes: 0 done; 1 the server or the storage refused or failed (one line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from orchestra.cli._output import fail, out, print_table

__all__ = ["schedules_app"]

schedules_app = typer.Typer(
    help="List, pause, resume and run the scheduled runs of a server.", no_args_is_help=True
)

UrlOption = Annotated[
    str | None, typer.Option("--url", envvar="ORCHESTRA_URL", help="The server, e.g. http://127.0.0.1:8000.")
]
KeyOption = Annotated[
    str | None,
    typer.Option("--api-key", envvar="ORCHESTRA_API_KEY", help="A workspace's API key.", show_default=False),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="The server's config: work on its storage, without a server."),
]
WorkspaceOption = Annotated[
    str | None, typer.Option("--workspace", help="With --config: the workspace (default: every one).")
]
IdArgument = Annotated[str, typer.Argument(help="The schedule.")]


def _server(url: str | None, api_key: str | None, what: Any) -> Any:
    from orchestra.client import Client, ClientError

    if url is None:
        raise fail("give --url (and --api-key) of a server, or --config to use its storage")
    try:
        with Client(url, api_key or "", timeout=60.0) as client:
            return what(client)
    except (ClientError, ValueError) as exc:
        raise fail(str(exc)) from None


def _storage(config_path: Path, workspace: str | None, what: Any) -> Any:
    """Run ``what(scheduler, workspaces)`` on the config's storage (no server, no ticks run here)."""
    from orchestra._sync import run_sync
    from orchestra.errors import OrchestraError
    from orchestra.hosting import Refused, load_config
    from orchestra.hosting.scheduler import Scheduler
    from orchestra.hosting.workspaces import Workspaces

    try:
        config = load_config(config_path)
        workspaces = Workspaces(config)
        scheduler = Scheduler(config, workspaces)  # changes schedules; starts no run
        names = [workspace] if workspace else workspaces.all()
        return run_sync(what, scheduler, names)
    except Refused as exc:
        raise fail(f"{exc.status} {exc.code}: {exc.message}") from None
    except (OrchestraError, OSError) as exc:
        raise fail(str(exc)) from None


def _table(schedules: list[dict[str, Any]]) -> None:
    table = Table("schedule", "agent", "cron", "zone", "session", "missed", "state")
    for s in schedules:
        state = "paused" if s["paused"] else "active"
        table.add_row(s["id"], s["agent"], s["cron"], s["timezone"], s["session"], s["missed"], state)
    print_table(table)


@schedules_app.command("list")
def schedules_list(
    url: UrlOption = None,
    api_key: KeyOption = None,
    config: ConfigOption = None,
    workspace: WorkspaceOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the schedules (the server config's and those made over the API).

    Example: [bold]orchestra schedules list --url http://127.0.0.1:8000[/]
    """
    if config is not None:

        async def listed(scheduler: Any, names: list[str]) -> list[dict[str, Any]]:
            return [s.model_dump(mode="json") for n in names for s in await scheduler.listed(n)]

        schedules = _storage(config, workspace, listed)
    else:
        schedules = _server(url, api_key, lambda c: c.schedules())
    if as_json:
        out.print_json(json.dumps(schedules))
    else:
        _table(schedules)


def _set_paused(
    schedule_id: str,
    paused: bool,
    url: str | None,
    api_key: str | None,
    config: Path | None,
    workspace: str | None,
) -> None:
    if config is not None:

        async def change(scheduler: Any, names: list[str]) -> dict[str, Any]:
            for name in names:
                if any(s.id == schedule_id for s in await scheduler.listed(name)):
                    return dict(
                        (await scheduler.set_paused(name, schedule_id, paused)).model_dump(mode="json")
                    )
            raise fail(f"there is no schedule {schedule_id!r} in {', '.join(names) or 'any workspace'}")

        schedule = _storage(config, workspace, change)
    else:
        schedule = _server(
            url,
            api_key,
            lambda c: c.pause_schedule(schedule_id) if paused else c.resume_schedule(schedule_id),
        )
    out.print(
        f"{schedule['id']}: {'paused' if schedule['paused'] else 'active'}", highlight=False, markup=False
    )


@schedules_app.command("pause")
def schedules_pause(
    schedule_id: IdArgument,
    url: UrlOption = None,
    api_key: KeyOption = None,
    config: ConfigOption = None,
    workspace: WorkspaceOption = None,
) -> None:
    """Pause a schedule: no tick runs until it is resumed (nor counts as missed).

    Example: [bold]orchestra schedules pause daily-report --url http://127.0.0.1:8000[/]
    """
    _set_paused(schedule_id, True, url, api_key, config, workspace)


@schedules_app.command("resume")
def schedules_resume(
    schedule_id: IdArgument,
    url: UrlOption = None,
    api_key: KeyOption = None,
    config: ConfigOption = None,
    workspace: WorkspaceOption = None,
) -> None:
    """Resume a paused schedule: its ticks run again from now.

    Example: [bold]orchestra schedules resume daily-report --url http://127.0.0.1:8000[/]
    """
    _set_paused(schedule_id, False, url, api_key, config, workspace)


@schedules_app.command("run-now")
def schedules_run_now(schedule_id: IdArgument, url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Start a schedule's run now, outside its ticks, on the server (prints the run's id; follow it with
    orchestra runs show / stream).

    Example: [bold]orchestra schedules run-now daily-report --url http://127.0.0.1:8000[/]
    """
    run = _server(url, api_key, lambda c: c.run_schedule(schedule_id))
    out.print(f"{run.run_id}: {run.status}", highlight=False, markup=False)
