"""The search options ``orchestra runs list`` and ``orchestra sessions list --url`` share (the query
parameters of ``GET /api/v1/runs`` and ``GET /api/v1/sessions``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from orchestra.cli._output import err, out

__all__ = [
    "CursorOption",
    "MetadataOption",
    "OrderOption",
    "SinceOption",
    "StatusOption",
    "UntilOption",
    "next_page",
    "search_filters",
]

StatusOption = Annotated[
    list[str] | None,
    typer.Option("--status", help="Only runs with this status (repeat for several): completed, failed, ..."),
]
SinceOption = Annotated[
    str | None, typer.Option("--since", help="Started (saved) at or after this ISO 8601 time.")
]
UntilOption = Annotated[
    str | None, typer.Option("--until", help="Started (saved) before this ISO 8601 time.")
]
MetadataOption = Annotated[
    list[str] | None,
    typer.Option("--metadata", help="key:value the run was started with (repeat: all must match)."),
]
OrderOption = Annotated[str, typer.Option("--order", help="newest or oldest first.")]
CursorOption = Annotated[
    str | None, typer.Option("--cursor", help="The next page, as the last one printed it.")
]


def search_filters(
    status: list[str] | None,
    since: str | None,
    until: str | None,
    metadata: list[str] | None,
    order: str,
    cursor: str | None,
) -> dict[str, Any]:
    """The client's search arguments (the server checks them and names what is wrong)."""
    pairs = {}
    for pair in metadata or []:
        key, sep, value = pair.partition(":")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not key:value", param_hint="--metadata")
        pairs[key] = value
    return {
        "status": status or None,
        "since": since,
        "until": until,
        "metadata": pairs or None,
        "order": order,
        "cursor": cursor,
    }


def next_page(page: dict[str, Any], *, to_stderr: bool = False) -> None:
    """Say how to ask for the next page, if there is one (on stderr beside JSON on stdout)."""
    if page.get("next_cursor"):
        (err if to_stderr else out).print(
            f"more: --cursor {page['next_cursor']}", highlight=False, markup=False
        )
