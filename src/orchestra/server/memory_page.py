"""The dashboard's memory page: browse the caller's namespaces and search their items.

``/memory?namespace=a/b&q=words`` lists the namespaces under ``a/b`` (each a link), and the items under it,
ranked by ``q`` when given (by meaning with the server's embedder, else the newest first). Read only:
nothing on the page changes memory, so it needs no form token. Each request maps to the same calls of
``WorkspaceMemory`` the API's memory routes make, as the logged-in key's caller.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from orchestra.errors import ConfigurationError
from orchestra.hosting import RunService
from orchestra.hosting.identity import memory_subject
from orchestra.server.pages import page

__all__ = ["mount_memory_page"]


def _link(namespace: tuple[str, ...] | list[str]) -> str:
    text = "/".join(namespace)
    return f"<a class='namespace' href='/memory?{urlencode({'namespace': text})}'>{html.escape(text)}</a>"


def mount_memory_page(app: FastAPI, runtime: RunService, workspace: Callable[[Request], str | None]) -> None:
    """Add ``/memory`` (see the module docstring) behind the dashboard's login."""
    memory = runtime.workspaces.memory

    @app.get("/memory", include_in_schema=False)
    async def memory_page(request: Request, namespace: str = "", q: str = "") -> Response:
        ws = workspace(request)
        if ws is None:
            return RedirectResponse("/login", status_code=303)
        parts = tuple(part for part in namespace.split("/") if part)
        try:
            namespaces = await memory.list_namespaces(ws, memory_subject(), parts, 200)
            items = await memory.search(ws, memory_subject(), parts, q or None, None, 50)
        except (ConfigurationError, ValueError) as exc:
            return page("Bad namespace", f"<p class='error'>{html.escape(str(exc))}</p>", 422)
        listed = "".join(f"<li>{_link(found)}</li>" for found in namespaces) or "<li>None.</li>"
        rows = "".join(
            "<tr class='item'>"
            f"<td>{_link(item.namespace)}</td><td>{html.escape(item.key)}</td>"
            f"<td><code>{html.escape(json.dumps(item.value, ensure_ascii=False))}</code></td>"
            f"<td>{html.escape(str(item.plain()['updated_at'])[:19])}</td>"
            f"<td>{'-' if item.score is None else f'{item.score:.3f}'}</td></tr>"
            for item in items
        )
        body = (
            "<h1>Memory</h1><p><a href='/'>Runs</a> · workspace <b>" + html.escape(ws) + "</b></p>"
            "<form method='get' action='/memory'><input id='memory-namespace' name='namespace' "
            "placeholder='namespace, e.g. customers/ana' value='" + html.escape(namespace) + "'> "
            "<input id='memory-query' name='q' placeholder='search' value='" + html.escape(q) + "'> "
            "<button id='memory-search' type='submit'>Search</button></form>"
            "<h2>Namespaces</h2><ul id='namespaces'>" + listed + "</ul>"
            "<h2>Items</h2><table id='items'><tr><th>namespace</th><th>key</th><th>value</th><th>updated</th>"
            "<th>score</th></tr>"
            + (rows or "<tr><td colspan='5'>Nothing remembered here.</td></tr>")
            + "</table>"
        )
        return page("Memory", body)
