"""``orchestra runs ...``: the runs of an ``orchestra serve`` server, over its API (list, show, cancel,
stream). The server is ``--url`` (or ``ORCHESTRA_URL``), the key ``--api-key`` (or ``ORCHESTRA_API_KEY``).

Exit codes: 0 done; 1 the server refused or failed (one line: status, code, message); 3 ``show``/``cancel
--wait`` found the run waiting for a human (interrupted with open questions).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from orchestra.cli._output import EXIT_INTERRUPTED, fail, out, print_table
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

if TYPE_CHECKING:
    from orchestra.client import Client

__all__ = ["runs_app"]

runs_app = typer.Typer(help="Follow and stop the runs of an orchestra serve server.", no_args_is_help=True)

UrlOption = Annotated[
    str, typer.Option("--url", envvar="ORCHESTRA_URL", help="The server, e.g. http://127.0.0.1:8000.")
]
KeyOption = Annotated[
    str,
    typer.Option("--api-key", envvar="ORCHESTRA_API_KEY", help="A workspace's API key.", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _call(url: str, api_key: str, what: Any) -> Any:
    """Run ``what(client)``; a refusal or an unreachable server is one line and exit 1."""
    # The client is imported by these commands only: the others start without it (and httpx).
    from orchestra.client import Client, ClientError

    try:
        with Client(url, api_key, timeout=60.0) as client:
            return what(client)
    except ClientError as exc:  # "404 unknown_run: ...", or the server could not be reached
        raise fail(str(exc)) from None
    except ValueError as exc:  # an id the server would refuse, refused before any request
        raise fail(str(exc)) from None


def _questions(record: dict[str, Any]) -> None:
    for question in record.get("interrupts") or []:
        where = ", ".join(f"{k} {question[k]}" for k in ("node", "tool") if question.get(k))
        out.print(
            f"  waiting: {question['id']} {question['name']}"
            + (f" ({where})" if where else "")
            + f": {json.dumps(question.get('reason'))}",
            highlight=False,
            markup=False,
        )


@runs_app.command("list")
def runs_list(
    url: UrlOption,
    api_key: KeyOption,
    agent_id: Annotated[str | None, typer.Option("--agent", help="Only this agent's runs.")] = None,
    session_id: Annotated[str | None, typer.Option("--session", help="Only this session's runs.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many.")] = 50,
    status: StatusOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    metadata: MetadataOption = None,
    order: OrderOption = "newest",
    cursor: CursorOption = None,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first: filtered by status, time and metadata, a page at a time (the next
    page's --cursor is printed after the table).

    Example: [bold]orchestra runs list --url http://127.0.0.1:8000 --agent support --status failed[/]
    """
    search = search_filters(status, since, until, metadata, order, cursor)
    page = _call(url, api_key, lambda c: c.search_runs(agent_id, session_id, limit=limit, **search))
    runs = page["runs"]
    if as_json:
        out.print_json(json.dumps(runs))
        next_page(page, to_stderr=True)
        return
    table = Table("run", "agent", "session", "status", "started", "took")
    for run in runs:
        took = f"{run['duration_ms']:.0f} ms" if run.get("duration_ms") is not None else "-"
        table.add_row(
            run["run_id"],
            run["agent_id"],
            run.get("session_id") or "-",
            run["status"],
            run["started_at"][:19].replace("T", " "),
            took,
        )
    print_table(table)
    next_page(page)


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    url: UrlOption,
    api_key: KeyOption,
    as_json: JsonOption = False,
) -> None:
    """Show a run: status, input, output, error, how it was stopped, a pipeline's nodes (while it runs,
    as its session has saved them so far), and the questions it waits on.

    Example: [bold]orchestra runs show 01a2... --url http://127.0.0.1:8000[/]
    """

    def read(client: Client) -> tuple[dict[str, Any], dict[str, Any] | None]:
        record = client.run(run_id)
        return record, _progress(client, record)

    record, progress = _call(url, api_key, read)
    if as_json:
        out.print_json(json.dumps(record))
    else:
        for key in ("run_id", "agent_id", "session_id", "status", "attempt", "input", "output", "error"):
            if record.get(key) is not None:
                out.print(f"{key}: {record[key]}", highlight=False, markup=False)
        if record.get("stopped"):
            out.print(f"stopped: {_stopped(record['stopped'])}", highlight=False, markup=False)
        _nodes(record, progress)
        _questions(record)
    if record.get("interrupts"):
        raise typer.Exit(EXIT_INTERRUPTED)


def _progress(client: Client, record: dict[str, Any]) -> dict[str, Any] | None:
    """A running pipeline's progress, from its session (its record gets its nodes when it ends)."""
    if record.get("kind") == "agent" or record.get("nodes") or not record.get("session_id"):
        return None
    if record.get("status") not in ("queued", "executing"):
        return None
    from orchestra.client import NotFoundError

    try:
        run = client.session(record["agent_id"], record["session_id"]).get("run")
    except NotFoundError:  # nothing saved yet
        return None
    return run if isinstance(run, dict) else None


def _nodes(record: dict[str, Any], progress: dict[str, Any] | None) -> None:
    """``nodes:`` one line per node: its status (and executions), from the record or the progress."""
    if record.get("nodes"):
        nodes = {
            node_id: f"{node.get('status')}"
            + (f" ({node['executions']} executions)" if (node.get("executions") or 0) > 1 else "")
            for node_id, node in record["nodes"].items()
        }
        header = "nodes:"
    elif progress and progress.get("nodes"):
        nodes = {node_id: str(status) for node_id, status in progress["nodes"].items()}
        header = "nodes (as its session has saved them so far):"
    else:
        return
    out.print(header, highlight=False, markup=False)
    for node_id, status in nodes.items():
        out.print(f"  {node_id}: {status}", highlight=False, markup=False)
    for name, text in ((progress or {}).get("maps") or {}).items():
        out.print(f"  {name}: {text}", highlight=False, markup=False)


_STOPPED_BY = {
    "cancel": "cancelled",
    "interrupt": "interrupted by a newer message (on_busy: interrupt), its completed work kept",
    "rollback": "rolled back by a newer message (on_busy: rollback), its turn discarded",
}


def _stopped(stopped: dict[str, Any]) -> str:
    """How a run was stopped, in words (the record keeps ``{"by", "run_id", "note"}``)."""
    by = str(stopped.get("by"))
    text = _STOPPED_BY.get(by, f"stopped ({by})")
    if stopped.get("run_id"):
        text += f"; asked by run {stopped['run_id']}"
    if stopped.get("note"):
        text += f"; {stopped['note']}"
    return text


@runs_app.command("cancel")
def runs_cancel(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    url: UrlOption,
    api_key: KeyOption,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until it has stopped.")] = False,
) -> None:
    """Stop a run, on whichever server runs it: it is saved interrupted and can be resumed.

    Example: [bold]orchestra runs cancel 01a2... --url http://127.0.0.1:8000 --wait[/]
    """

    def cancel(client: Client) -> dict[str, Any]:
        client.cancel(run_id)
        return client.wait(run_id, timeout=300) if wait else client.run(run_id)

    record = _call(url, api_key, cancel)
    out.print(f"{run_id}: {record['status']}", highlight=False)


@runs_app.command("stream")
def runs_stream(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    url: UrlOption,
    api_key: KeyOption,
    after: Annotated[
        str | None, typer.Option("--from", help="Only the events after this event id (as Last-Event-ID).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per event.")] = False,
) -> None:
    """Print a run's events (the ones already kept, then live) until its last one; a lost connection
    is resumed from the last event id.

    Example: [bold]orchestra runs stream 01a2... --url http://127.0.0.1:8000 --from 41[/]
    """

    def follow(client: Client) -> None:
        for event in client.stream(run_id=run_id, resume_from=after):
            if as_json:
                out.print(
                    json.dumps({"id": event.id, "event": event.event, "data": event.data}),
                    highlight=False,
                    markup=False,
                    soft_wrap=True,
                )
            elif event.event == "text":
                out.print(f"{event.id} text {event.data.get('text', '')!r}", highlight=False, markup=False)
            else:
                out.print(f"{event.id} {event.event} {json.dumps(event.data)}", highlight=False, markup=False)

    _call(url, api_key, follow)


@runs_app.command("send-event")
def runs_send_event(
    run_id: Annotated[str, typer.Argument(help="A run of the session that waits (or will wait).")],
    name: Annotated[str, typer.Argument(help="The event's name (what wait_for_event waits for).")],
    url: UrlOption,
    api_key: KeyOption,
    payload: Annotated[str, typer.Option("--payload", help="The event's payload: JSON, or text.")] = "null",
    key: Annotated[
        str | None,
        typer.Option("--key", help="Its Idempotency-Key: a repeat with this key is not delivered twice."),
    ] = None,
) -> None:
    """Send an event to a run's session: a wait for NAME takes it exactly once (docs/waiting.md).

    Example: [bold]orchestra runs send-event 01a2... payment --payload '{"amount": 42}' --key pay-7[/]
    """
    try:
        value: Any = json.loads(payload)
    except json.JSONDecodeError:
        value = payload  # plain text
    sent = _call(url, api_key, lambda c: c.send_event(run_id, name, value, idempotency_key=key))
    what = "already sent (nothing new kept)" if sent["duplicate"] else "sent"
    out.print(
        f"event {name!r} {what}: session {sent['session_id']}, key {sent['key']}",
        highlight=False,
        markup=False,
    )
