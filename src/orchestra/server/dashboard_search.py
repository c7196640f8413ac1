"""The dashboard's search: the filter form of its runs and sessions lists (status, time, metadata, order),
the search a page's query asks for, and the link to the next page (``orchestra.hosting.search``)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from datetime import datetime
from urllib.parse import urlencode

from orchestra.hosting import FINAL, Refused
from orchestra.hosting.search import Query, SessionHit, parse_metadata, utc
from orchestra.server.pages import badge

__all__ = ["FIELDS", "next_link", "query_of", "search_form", "session_rows"]

FIELDS = ("status", "since", "until", "metadata", "order")
STATUSES = sorted({*FINAL, "queued", "executing"})
PAGE = 50


def query_of(params: Mapping[str, str]) -> Query:
    """The search a page's query string asks for (``Refused`` 422 naming what is wrong)."""
    status = params.get("status") or ""
    if status and status not in STATUSES:
        raise Refused(422, "invalid_query", f"status {status!r} is not one of {', '.join(STATUSES)}")
    times = {}
    for name in ("since", "until"):
        value = params.get(name) or ""
        try:
            times[name] = utc(datetime.fromisoformat(value)) if value else None
        except ValueError:
            raise Refused(422, "invalid_query", f"{name} {value!r} is not an ISO 8601 time") from None
    pairs = [p.strip() for p in (params.get("metadata") or "").split(",") if p.strip()]
    return Query(
        statuses=frozenset([status] if status else []),
        since=times["since"],
        until=times["until"],
        metadata=parse_metadata(pairs),
        limit=_limit(params.get("limit")),
        order="oldest" if params.get("order") == "oldest" else "newest",
        cursor=params.get("cursor") or None,
    )


def _limit(value: str | None) -> int:
    try:
        return min(max(int(value or PAGE), 1), 500)
    except ValueError:
        raise Refused(422, "invalid_query", f"limit {value!r} is not a whole number") from None


def search_form(action: str, params: Mapping[str, str], extra: str = "") -> str:
    """The filter form (``extra``: the page's own fields before these, e.g. the agent select)."""
    status = params.get("status") or ""
    options = "<option value=''>any status</option>" + "".join(
        f"<option value='{s}'{' selected' if s == status else ''}>{s}</option>" for s in STATUSES
    )
    order = params.get("order") or "newest"
    orders = "".join(
        f"<option value='{o}'{' selected' if o == order else ''}>{o} first</option>"
        for o in ("newest", "oldest")
    )

    def field(name: str, hint: str) -> str:
        value = html.escape(params.get(name) or "")
        return f" <input name='{name}' placeholder='{hint}' value='{value}'>"

    return (
        f"<form id='search' method='get' action='{action}'>{extra}"
        f" <select name='status'>{options}</select>"
        + field("since", "since (ISO time)")
        + field("until", "until (ISO time)")
        + field("metadata", "key:value, key:value")
        + f" <select name='order'>{orders}</select> <button type='submit'>Filter</button></form>"
    )


def next_link(action: str, params: Mapping[str, str], cursor: str | None) -> str:
    """A link to the next page (none after the last)."""
    if cursor is None:
        return ""
    kept = {k: v for k, v in params.items() if v and k != "cursor"}
    return f"<p><a id='next-page' href='{action}?{html.escape(urlencode({**kept, 'cursor': cursor}))}'>Next page</a></p>"


def session_rows(hits: list[SessionHit]) -> str:
    rows = []
    for hit in hits:
        href = f"/sessions/{html.escape(hit.agent_id)}/{html.escape(hit.session_id)}"
        status = badge(hit.last_run.status) if hit.last_run else "-"
        meta = ", ".join(f"{k}:{v}" for k, v in (hit.last_run.metadata if hit.last_run else {}).items())
        updated = hit.updated_at.isoformat()[:19] if hit.updated_at else "-"
        rows.append(
            f"<tr class='session'><td><a href='{href}'>{html.escape(hit.session_id)}</a></td>"
            f"<td>{html.escape(hit.agent_id)}</td><td>{status}</td><td>{html.escape(updated)}</td>"
            f"<td>{html.escape(meta) or '-'}</td></tr>"
        )
    return "".join(rows)
