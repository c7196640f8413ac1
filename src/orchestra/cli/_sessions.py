"""``orchestra sessions ...``: look after stored sessions in any storage (list, show, history, restore,
export, import, fork, compact, prune, delete, migrate)."""

from __future__ import annotations

import functools
import json
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from orchestra.cli._migrate import migrate_command
from orchestra.cli._options import JsonOption, StorageOption, open_storage, session_call
from orchestra.cli._output import EXIT_FAILED, err, fail, out, print_table
from orchestra.cli._search import (
    CursorOption,
    MetadataOption,
    OrderOption,
    SinceOption,
    StatusOption,
    UntilOption,
    next_page,
    search_filters,
)
from orchestra.errors import SessionError
from orchestra.multiagent import Status
from orchestra.session import admin
from orchestra.session.writer_lock import WriterLock
from orchestra.storage import DEFAULT_STORAGE_URI

__all__ = ["sessions_app"]

sessions_app = typer.Typer(help="Look after stored sessions (any storage URI).", no_args_is_help=True)
sessions_app.command("migrate")(migrate_command)


def _scope(value: str | None, default_kind: str = "agent") -> tuple[Any, str]:
    if not value:
        return default_kind, "default"
    kind, sep, scope_id = value.partition("/")
    if not sep or kind not in ("agent", "multiAgent"):
        raise typer.BadParameter(
            "write agent/<agent_id> or multiAgent/<orchestrator_id>", param_hint="--scope"
        )
    return kind, scope_id


@sessions_app.command("list")
def sessions_list(
    storage: StorageOption = None,
    url: Annotated[
        str | None, typer.Option("--url", help="Search an orchestra serve server's sessions instead.")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="ORCHESTRA_API_KEY", help="With --url: a workspace's key."),
    ] = None,
    agent_id: Annotated[str | None, typer.Option("--agent", help="With --url: one agent's sessions.")] = None,
    status: StatusOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    metadata: MetadataOption = None,
    order: OrderOption = "newest",
    cursor: CursorOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="With --url: a page's size.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """List the sessions in a storage, with their scopes and when they were last saved; with --url, a
    server's sessions, filtered by their latest run's status and metadata and by time, a page at a time.

    Example: [bold]orchestra sessions list --storage file:./.orchestra[/]
    """
    if url is not None:
        search = search_filters(status, since, until, metadata, order, cursor)
        _server_sessions(url, api_key or "", agent_id, limit, search, as_json)
        return
    if status or metadata or since or until or cursor:
        raise fail(
            "--status, --since, --until, --metadata and --cursor search a server's sessions: give --url"
        )
    infos = session_call(admin.list_sessions, open_storage(storage))
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
    print_table(table)


def _server_sessions(
    url: str, api_key: str, agent_id: str | None, limit: int, search: dict[str, Any], as_json: bool
) -> None:
    from orchestra.client import Client, ClientError

    try:
        with Client(url, api_key, timeout=60.0) as client:
            page = client.search_sessions(agent_id, limit=limit, **search)
    except (ClientError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps(page["sessions"]))
        next_page(page, to_stderr=True)
        return
    table = Table("agent", "session", "status", "updated", "metadata")
    for hit in page["sessions"]:
        updated = (hit["updated_at"] or "-")[:19].replace("T", " ")
        meta = ", ".join(f"{k}:{v}" for k, v in hit["metadata"].items())
        table.add_row(hit["agent_id"], hit["session_id"], hit["status"] or "-", updated, meta or "-")
    print_table(table)
    next_page(page)


@sessions_app.command("show")
def sessions_show(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    storage: StorageOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session's scopes: run status and node statuses, or message counts.

    Example: [bold]orchestra sessions show run-20261130-101500-ab12[/]
    """
    store = open_storage(storage)
    session_call(_session_exists, store, session_id, storage)
    info = session_call(admin.describe_session, store, session_id)
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
            _print_detail(key, value, "  ")
        if nodes:
            table = Table("node", "status")
            for node_id, status in nodes.items():
                table.add_row(node_id, str(status))
            print_table(table)


def _print_detail(key: str, value: Any, indent: str) -> None:
    """``key: value``; a mapping as one indented line per entry (words, not a Python dict)."""
    if isinstance(value, dict) and value:
        out.print(f"{indent}{key}:", highlight=False, markup=False)
        for inner, item in value.items():
            _print_detail(str(inner), item, indent + "  ")
    else:
        out.print(f"{indent}{key}: {value}", highlight=False, markup=False)


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
    store = open_storage(storage)
    snapshots = session_call(admin.scope_history, store, session_id, kind, scope_id)
    if not snapshots:  # none yet, or no such scope: say which
        session_call(_scope_exists, store, session_id, kind, scope_id, storage)
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
    for snap in snapshots:
        table.add_row(
            str(snap.created_at), str(snap.journal_seq), json.dumps(snap.app_data), snap.snapshot_id
        )
    print_table(table)


async def _scope_exists(store: Any, session_id: str, kind: Any, scope_id: str, storage: str | None) -> None:
    """Raise, naming what there is to look at instead, when a session or its scope does not exist."""
    await _session_exists(store, session_id, storage)
    try:
        await admin.load_scope(store, session_id, kind, scope_id)
    except SessionError as exc:
        where = f" --storage {storage}" if storage else ""
        raise SessionError(
            f"{exc}: see its scopes with orchestra sessions show {session_id}{where}"
        ) from None


async def _session_exists(store: Any, session_id: str, storage: str | None) -> None:
    """Raise, naming the storage and how to list its sessions, when it holds no such session."""
    if not await admin.session_exists(store, session_id):
        where = f" --storage {storage}" if storage else ""
        raise SessionError(
            f"no session {session_id!r} in {storage or DEFAULT_STORAGE_URI}: see the sessions there with "
            f"orchestra sessions list{where}"
        )


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
    store = open_storage(storage)
    session_call(_session_exists, store, session_id, storage)
    session_call(admin.restore_scope, store, session_id, kind, scope_id, snapshot_id)
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
    store = open_storage(storage)
    session_call(_session_exists, store, session_id, storage)
    data = session_call(admin.export_any_scope, store, session_id, kind, scope_id)
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
    store = open_storage(storage)
    info = session_call(admin.describe_session, store, session_id)
    if info.layout == "repository":
        raise fail(f"session {session_id} uses the repository layout, which keeps no immutable snapshots")
    from orchestra.session.scopes import open_scope

    total = 0
    for scope in info.scopes:
        journal = open_scope(store, session_id, scope.kind, scope.scope_id)
        deleted = session_call(lambda j=journal: j.prune_checkpoints(keep=keep, older_than=age))
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
    from orchestra.session.scopes import ScopeLayout, open_scope, writers_delete_after

    age = _duration(min_age, "--min-age")
    store = open_storage(storage)
    info = session_call(admin.describe_session, store, session_id)
    if info.layout == "repository":
        raise fail(f"session {session_id} uses the repository layout, which has no journal to compact")

    async def compact(kind: Any, scope_id: str) -> int:
        journal = open_scope(store, session_id, kind, scope_id, Compaction(delete_after=age))
        await journal.load()
        await journal.compact()
        if keep is not None:
            await journal.prune_checkpoints(keep=keep)
        return await journal.fold()

    for scope in info.scopes:
        layout = ScopeLayout(session_id, scope.kind, scope.scope_id)
        writers = session_call(writers_delete_after, store, layout)
        if age < writers and not force:
            raise fail(
                f"--min-age {min_age} is below the {writers} after which the writers of "
                f"{scope.kind}/{scope.scope_id} check that their last journal record is still there: a writer "
                "idle since then would save into the folded journal and its turn would be lost. Give a "
                "larger --min-age, or --force when no writer is running"
            )
    for scope in info.scopes:
        deleted = session_call(compact, scope.kind, scope.scope_id)
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
    copied = session_call(fork_scope, open_storage(storage), session_id, kind, scope_id, to, snapshot_id)
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
        imported = session_call(
            import_strands_snapshot,
            open_storage(storage),
            file.read_bytes(),
            str(file),
            target_session,
            target_agent,
        )
    elif source == "orchestra":
        imported = session_call(import_scope, open_storage(storage), file.read_bytes(), session_id)
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
    store = open_storage(storage)
    writer = WriterLock.inspect(store, session_id)
    if writer is not None and writer.alive:
        raise fail(
            f"session {session_id} is being run by process {writer.pid} on {writer.host}: deleting it now "
            "would leave a session its run cannot save to. Stop the run first"
        )
    known = [i for i in session_call(admin.list_sessions, store) if i.session_id == session_id]
    if not known:
        raise fail(
            f"no session {session_id} in {storage or DEFAULT_STORAGE_URI}: nothing to delete (see "
            "orchestra sessions list" + (f" --storage {storage})" if storage else ")")
        )
    if not force and known and admin.may_have_live_writer(store, known[0]):
        raise fail(
            f"session {session_id} was saved less than 10 minutes ago and may still have a live writer, "
            "which could recreate part of it after the delete. Stop the writer and pass --force, or wait"
        )
    if not yes and not typer.confirm(f"Delete session {session_id}?"):
        raise typer.Exit(EXIT_FAILED)
    count = session_call(admin.delete_session, store, session_id)
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
    doomed = session_call(prune, open_storage(storage), _duration(older_than))
    verb = "would delete" if dry_run else "deleted"
    out.print(
        f"{verb} {len(doomed)} session(s)" + (": " + ", ".join(doomed) if doomed else ""), highlight=False
    )
