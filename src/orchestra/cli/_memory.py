"""``orchestra memory ...``: look at and erase a memory store in any storage (list, search, get, forget).

A namespace is written ``a/b`` (the parts of ``("a", "b")``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from orchestra._imports import import_object
from orchestra.cli._options import JsonOption, StorageOption, open_storage
from orchestra.cli._output import fail, out, print_table
from orchestra.errors import OrchestraError

__all__ = ["memory_app"]

memory_app = typer.Typer(help="Look at and erase memory stores (any storage URI).", no_args_is_help=True)

EmbedderOption = Annotated[
    str | None,
    typer.Option(
        "--embedder",
        metavar="PATH",
        help="package.module:name of the store's Embedder (or a function returning one), for --query.",
    ),
]
PrefixOption = Annotated[str, typer.Option("--prefix", metavar="KEY", help="The store's storage key prefix.")]


def _namespace(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.strip("/").split("/") if part)


def _store(storage: str | None, prefix: str, embedder: str | None = None) -> Any:
    from orchestra.memory import MemoryStore

    found: Any = None
    if embedder is not None:
        try:
            found = import_object(embedder)
        except OrchestraError as exc:
            raise fail(str(exc)) from None
        if not callable(getattr(found, "embed", None)) or isinstance(found, type):
            found = found()
    return MemoryStore(open_storage(storage), embedder=found, prefix=prefix)


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except (OrchestraError, ValueError) as exc:
        raise fail(str(exc)) from None


def _when(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _plain(item: Any) -> dict[str, Any]:
    return {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": _when(item.created_at),
        "updated_at": _when(item.updated_at),
        "expires_at": _when(item.expires_at),
        "score": item.score,
    }


def _print_items(items: list[Any], as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps([_plain(item) for item in items]))
        return
    table = Table("namespace", "key", "value", "updated", "score")
    for item in items:
        score = "-" if item.score is None else f"{item.score:.3f}"
        table.add_row(
            "/".join(item.namespace), item.key, json.dumps(item.value), _when(item.updated_at), score
        )
    print_table(table)


@memory_app.command("list")
def memory_list(
    prefix_ns: Annotated[
        str, typer.Argument(metavar="[NAMESPACE]", help="Only under this namespace (a/b).")
    ] = "",
    storage: StorageOption = None,
    prefix: PrefixOption = "memory/",
    limit: Annotated[int, typer.Option("--limit", min=1)] = 100,
    as_json: JsonOption = False,
) -> None:
    """List the namespaces that hold items.

    Example: [bold]orchestra memory list users --storage sqlite:./memory.db[/]
    """
    found = _call(_store(storage, prefix).list_namespaces, _namespace(prefix_ns), limit=limit)
    if as_json:
        out.print_json(json.dumps([list(namespace) for namespace in found]))
        return
    for namespace in found:
        out.print("/".join(namespace), highlight=False)


@memory_app.command("search")
def memory_search(
    namespace: Annotated[str, typer.Argument(help="The namespace prefix to search under (a/b).")],
    query: Annotated[
        str | None, typer.Option("--query", "-q", help="Rank by meaning (needs --embedder).")
    ] = None,
    filter_: Annotated[
        str | None, typer.Option("--filter", metavar="JSON", help='Match JSON fields, e.g. {"tier": "gold"}.')
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1)] = 10,
    storage: StorageOption = None,
    prefix: PrefixOption = "memory/",
    embedder: EmbedderOption = None,
    as_json: JsonOption = False,
) -> None:
    """Search the items under a namespace: by meaning with --query, by fields with --filter, else newest first."""
    try:
        matched = json.loads(filter_) if filter_ is not None else None
    except json.JSONDecodeError as exc:
        raise fail(f"--filter is not JSON: {exc}") from None
    store = _store(storage, prefix, embedder)
    items = _call(store.search, _namespace(namespace), query=query, filter=matched, limit=limit)
    _print_items(items, as_json)


@memory_app.command("get")
def memory_get(
    namespace: Annotated[str, typer.Argument(help="The item's namespace (a/b).")],
    key: Annotated[str, typer.Argument(help="The item's key.")],
    storage: StorageOption = None,
    prefix: PrefixOption = "memory/",
    as_json: JsonOption = False,
) -> None:
    """Show one item (exit 1 when there is none)."""
    item = _call(_store(storage, prefix).get, _namespace(namespace), key)
    if item is None:
        raise fail(f"no item {key!r} in namespace {namespace!r}")
    if as_json:
        out.print_json(json.dumps(_plain(item)))
    else:
        _print_items([item], False)


@memory_app.command("forget")
def memory_forget(
    namespace: Annotated[
        str, typer.Argument(help="The namespace prefix to erase (a/b): every item under it.")
    ],
    storage: StorageOption = None,
    prefix: PrefixOption = "memory/",
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Erase every item under a namespace prefix, and every index entry naming it."""
    parts = _namespace(namespace)
    if not parts:
        raise fail("give a namespace to forget (a/b); forgetting everything is not offered")
    if not yes and not typer.confirm(f"Erase every memory under {namespace!r}?"):
        raise typer.Exit(1)
    removed = _call(_store(storage, prefix).forget, parts)
    out.print(f"forgot {namespace}: {removed} keys removed", highlight=False)
