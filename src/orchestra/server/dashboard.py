"""The dashboard: server-rendered HTML pages behind a login form that takes an API key.

``/login`` (a form with a CSRF token, checked against the request's ``Origin``) sets an HttpOnly,
SameSite=Strict cookie holding a signed, expiring session token (never the key); ``/logout`` is a POST;
``/`` lists the workspace's agents and runs (filter by agent, session, status, time and metadata, a page at
a time; ``/sessions`` lists sessions the same way: ``dashboard_search.py``); ``/runs/<id>`` shows a
run with a Conversation tab (every message, tool calls and results included) and, for pipelines, a
Nodes tab with the node graph coloured by status, and its controls (answer its open interrupts, cancel,
resume: ``controls.py``, which also serves a session's whole conversation); ``/memory`` browses and
searches the workspace's memory (``memory_page.py``).
"""

from __future__ import annotations

import hmac
import html
import secrets
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from orchestra._ids import validate_id
from orchestra._logging import get_logger
from orchestra.hosting import Refused, RunService
from orchestra.hosting.config import ServerConfig
from orchestra.hosting.identity import acting_as, may_call
from orchestra.hosting.records import RunRecord
from orchestra.server.auth import KeyRing, SessionTokens
from orchestra.server.controls import controls_html, mount_controls
from orchestra.server.dashboard_search import next_link, query_of, search_form, session_rows
from orchestra.server.memory_page import mount_memory_page
from orchestra.server.pages import STATUS_COLOURS, badge, conversation, page

__all__ = ["mount_dashboard"]

SESSION_COOKIE = "orchestra_session"
CSRF_COOKIE = "orchestra_csrf"
log = get_logger("orchestra.server")


def _graph_svg(nodes: dict[str, dict[str, Any]], edges: list[list[str]]) -> str:
    """Nodes in layers (longest path from the entry over non-looping edges), coloured by status."""
    level = dict.fromkeys(nodes, 0)
    forward = [(s, d) for s, d, *_ in edges if s in nodes and d in nodes and s != d]
    for _ in range(len(nodes)):  # relax; edges that would keep pushing a node down are loops
        changed = False
        for src, dst in forward:
            if level[dst] < level[src] + 1 <= len(nodes) - 1 and list(nodes).index(dst) > list(nodes).index(
                src
            ):
                level[dst] = level[src] + 1
                changed = True
        if not changed:
            break
    rows: dict[int, list[str]] = {}
    for node_id, depth in level.items():
        rows.setdefault(depth, []).append(node_id)
    width, height = 170, 44
    position = {}
    for depth, members in rows.items():
        for index, node_id in enumerate(members):
            position[node_id] = (20 + index * (width + 30), 20 + depth * (height + 40))
    total_w = max((x for x, _ in position.values()), default=0) + width + 40
    total_h = max((y for _, y in position.values()), default=0) + height + 40
    parts = [f"<svg id='node-graph' width='{total_w}' height='{total_h}' xmlns='http://www.w3.org/2000/svg'>"]
    parts.append(
        "<defs><marker id='arrow' markerWidth='8' markerHeight='8' refX='8' refY='4' orient='auto'>"
        "<path d='M0,0 L8,4 L0,8 z' fill='#888'/></marker></defs>"
    )
    if len(forward) < 40:
        for src, dst in forward:
            (x1, y1), (x2, y2) = position[src], position[dst]
            parts.append(
                f"<line x1='{x1 + width / 2}' y1='{y1 + height}' x2='{x2 + width / 2}' y2='{y2}' "
                "stroke='#888' marker-end='url(#arrow)'/>"
            )
    for node_id, (x, y) in position.items():
        status = str(nodes[node_id].get("status", "pending"))
        colour = STATUS_COLOURS.get(status, "#455a64")
        label = html.escape(node_id)
        parts.append(
            f"<g class='node' data-node='{label}' data-status='{html.escape(status)}'>"
            f"<rect x='{x}' y='{y}' width='{width}' height='{height}' rx='6' fill='{colour}'/>"
            f"<text x='{x + width / 2}' y='{y + 18}' fill='white' text-anchor='middle' font-size='13'>{label}</text>"
            f"<text x='{x + width / 2}' y='{y + 34}' fill='white' text-anchor='middle' font-size='11'>"
            f"{html.escape(status)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def same_origin(request: Request) -> bool:
    """Whether a form post comes from this site, by ``Origin`` (else ``Referer``) when the browser says.

    Browsers send ``Origin: null`` under our ``Referrer-Policy: no-referrer``; the CSRF token decides then.
    """
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return True
    parsed = urlsplit(source)
    return parsed.netloc == request.headers.get("host", "") and parsed.scheme in ("http", "https")


def cross_site() -> Response:
    log.warning("dashboard.cross_site_post_refused")
    return page("Refused", "<p class='error'>A form from another site cannot log you in or out.</p>", 403)


def mount_dashboard(app: FastAPI, runtime: RunService, keys: KeyRing, config: ServerConfig) -> None:
    """Add the dashboard's pages to ``app``."""

    tokens = SessionTokens(keys)

    def workspace(request: Request) -> str | None:
        """The logged-in key's workspace; its identity becomes the request's caller (ownership holds)."""
        identity = tokens.identity_of(request.cookies.get(SESSION_COOKIE))
        if identity is None:
            return None
        acting_as(identity)
        return identity.workspace

    def login_form(error: str = "") -> HTMLResponse:
        # A CSRF token, double-submitted: the form carries it and so does a SameSite=Strict cookie, which
        # a form on another site cannot make the browser send.
        csrf = secrets.token_urlsafe(18)
        message = f"<p class='error'>{html.escape(error)}</p>" if error else ""
        form = page(
            "Log in",
            "<h1>orchestra</h1>" + message + "<form method='post' action='/login'>"
            f"<input type='hidden' name='csrf' value='{csrf}'>"
            "<label>API key <input type='password' name='key' id='key' autocomplete='off' required></label> "
            "<button type='submit' id='login'>Log in</button></form>",
            401 if error else 200,
        )
        form.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", path="/login")
        return form

    @app.get("/login", include_in_schema=False)
    async def login_page() -> HTMLResponse:
        return login_form()

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", errors="replace"))
        sent = (form.get("csrf") or [""])[0]
        expected = request.cookies.get(CSRF_COOKIE, "")
        if not same_origin(request) or not expected or not hmac.compare_digest(sent, expected):
            return cross_site()
        key = (form.get("key") or [""])[0].strip()
        ws = keys.workspace_of(key)
        if ws is None:
            log.warning("dashboard.login_refused", client=request.client.host if request.client else None)
            return login_form("That key is not valid.")
        response = RedirectResponse("/", status_code=303)
        # Secure when the browser talks https: to us, or to the TLS proxy in front of us (uvicorn sees
        # https through X-Forwarded-Proto from the addresses given to --forwarded-allow-ips).
        secure = request.url.scheme == "https"
        response.set_cookie(
            SESSION_COOKIE,
            tokens.issue(ws, key),
            max_age=tokens.lifetime_seconds,
            httponly=True,
            samesite="strict",
            secure=secure,
        )
        response.delete_cookie(CSRF_COOKIE, path="/login")
        return response

    def logout_form(request: Request) -> str:
        token = tokens.logout_token(request.cookies.get(SESSION_COOKIE, ""))
        return (
            "<form class='inline' method='post' action='/logout'>"
            f"<input type='hidden' name='csrf' value='{token}'><button id='logout'>log out</button></form>"
        )

    @app.post("/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", errors="replace"))
        expected = tokens.logout_token(request.cookies.get(SESSION_COOKIE, ""))
        if not same_origin(request) or not hmac.compare_digest((form.get("csrf") or [""])[0], expected):
            return cross_site()
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    @app.get("/", include_in_schema=False)
    async def home(request: Request, agent_id: str | None = None, session_id: str | None = None) -> Response:
        ws = workspace(request)
        if ws is None:
            return RedirectResponse("/login", status_code=303)
        if session_id:
            try:
                validate_id(session_id, "session id")
            except ValueError as exc:
                return page("Bad filter", f"<p class='error'>{html.escape(str(exc))}</p>", 422)
        hosted = [h for h in config.agents if h.workspace == ws and may_call(h)]
        ids = [h.id for h in hosted if agent_id in (None, "", h.id)]
        params = dict(request.query_params)
        try:  # status, time, metadata, order and the page (dashboard_search.py)
            records, cursor = await runtime.search_runs(ws, ids, session_id or None, query_of(params))
        except Refused as exc:
            return page("Bad filter", f"<p class='error'>{html.escape(exc.message)}</p>", 422)
        agent_rows = "".join(
            f"<tr><td><a href='/?{urlencode({'agent_id': h.id})}'>{html.escape(h.id)}</a></td>"
            f"<td>{html.escape(config.spec_of(h.id).spec.kind)}</td>"
            f"<td>{html.escape(h.description or config.spec_of(h.id).spec.description or '')}</td></tr>"
            for h in hosted
        )
        run_rows = "".join(
            f"<tr class='run'><td><a class='run-link' href='/runs/{html.escape(r.run_id)}'>{html.escape(r.run_id[:13])}…</a></td>"
            f"<td>{html.escape(r.agent_id)}</td><td>{html.escape(r.session_id or '-')}</td><td>{r.mode}</td>"
            f"<td>{badge(r.status)}</td><td>{html.escape(r.started_at[:19])}</td>"
            f"<td>{r.duration_ms or 0:.0f} ms</td></tr>"
            for r in records
        )
        options = "".join(
            f"<option value='{html.escape(h.id)}'{' selected' if h.id == agent_id else ''}>{html.escape(h.id)}</option>"
            for h in hosted
        )
        body = (
            "<h1>orchestra</h1><p>Workspace <b>"
            + html.escape(ws)
            + "</b> · <a id='memory-link' href='/memory'>"
            "Memory</a> · " + logout_form(request) + "</p>"
            "<h2>Agents</h2><table><tr><th>agent</th><th>kind</th><th>description</th></tr>"
            + agent_rows
            + "</table>"
            "<h2>Runs</h2><p><a id='sessions-link' href='/sessions'>Sessions</a></p>"
            + search_form(
                "/",
                params,
                "<select name='agent_id'><option value=''>all agents</option>"
                + options
                + "</select> <input name='session_id' placeholder='session id' value='"
                + html.escape(session_id or "")
                + "'>",
            )
            + "<table id='runs'><tr><th>run</th><th>agent</th><th>session</th><th>mode</th><th>status</th>"
            "<th>started</th><th>took</th></tr>"
            + (run_rows or "<tr><td colspan='7'>No runs yet.</td></tr>")
            + "</table>"
            + next_link("/", params, cursor)
        )
        return page("Runs", body)

    @app.get("/sessions", include_in_schema=False)
    async def sessions_page(request: Request, agent_id: str | None = None) -> Response:
        ws = workspace(request)
        if ws is None:
            return RedirectResponse("/login", status_code=303)
        hosted = [h for h in config.agents if h.workspace == ws]
        params = dict(request.query_params)
        try:
            ids = [h.id for h in hosted if agent_id in (None, "", h.id)]
            hits, cursor = await runtime.search_sessions(ws, ids, query_of(params))
        except Refused as exc:
            return page("Bad filter", f"<p class='error'>{html.escape(exc.message)}</p>", 422)
        options = "".join(
            f"<option value='{html.escape(h.id)}'{' selected' if h.id == agent_id else ''}>{html.escape(h.id)}</option>"
            for h in hosted
        )
        body = (
            "<p><a href='/'>All runs</a></p><h1>Sessions</h1>"
            + search_form(
                "/sessions",
                params,
                f"<select name='agent_id'><option value=''>all agents</option>{options}</select>",
            )
            + "<table id='sessions'><tr><th>session</th><th>agent</th><th>last run</th><th>saved</th>"
            "<th>metadata</th></tr>"
            + (session_rows(hits) or "<tr><td colspan='5'>No sessions.</td></tr>")
            + "</table>"
            + next_link("/sessions", params, cursor)
        )
        return page("Sessions", body)

    @app.get("/runs/{run_id}", include_in_schema=False)
    async def run_page(request: Request, run_id: str, tab: str = "conversation") -> Response:
        ws = workspace(request)
        if ws is None:
            return RedirectResponse("/login", status_code=303)
        try:  # an id the storage could not hold (too long, a slash) is no run, not a 500
            record = await runtime.run_record(ws, validate_id(run_id, "run id"))
        except ValueError:
            record = None
        if record is None:
            return page(
                "Not found", f"<h1>No run {html.escape(run_id)}</h1><p><a href='/'>All runs</a></p>", 404
            )
        return page(f"Run {run_id}", _run_body(record, tab, controls_html(record, form_token(request))))

    def form_token(request: Request) -> str:
        return tokens.form_token(request.cookies.get(SESSION_COOKIE, ""))

    mount_controls(app, runtime, workspace, form_token, same_origin)
    mount_memory_page(app, runtime, workspace)  # /memory: browse and search the workspace's memory


def _run_body(record: RunRecord, tab: str, controls: str) -> str:
    tabs = ["conversation", "overview"] + (["nodes"] if record.nodes else [])
    tab = tab if tab in tabs else "conversation"
    links = "".join(
        f"<a id='tab-{t}' class='{'active' if t == tab else ''}' href='?tab={t}'>{t.capitalize()}</a>"
        for t in tabs
    )
    session = html.escape(record.session_id or "-")
    if record.session_id is not None:  # the session's whole conversation, every turn
        href = f"/sessions/{html.escape(record.agent_id)}/{session}"
        session = f"<a id='session-link' href='{href}'>{session}</a>"
    header = (
        f"<p><a href='/'>All runs</a></p><h1>Run {html.escape(record.run_id)}</h1>"
        f"<p>{html.escape(record.agent_id)} · {html.escape(record.kind)} · {badge(record.status)} · "
        f"session {session} ({record.mode})</p>{controls}<div class='tabs'>{links}</div>"
    )
    if tab == "overview":
        usage = ", ".join(f"{k}: {v}" for k, v in record.usage.items())
        error = f"<p class='error'>{html.escape(record.error)}</p>" if record.error else ""
        content = (
            f"<table><tr><th>started</th><td>{html.escape(record.started_at)}</td></tr>"
            f"<tr><th>finished</th><td>{html.escape(record.finished_at or '-')}</td></tr>"
            f"<tr><th>duration</th><td>{record.duration_ms or 0:.1f} ms</td></tr>"
            f"<tr><th>usage</th><td>{html.escape(usage)}</td></tr>"
            f"<tr><th>input</th><td><pre>{html.escape(str(record.input))}</pre></td></tr>"
            f"<tr><th>output</th><td><pre>{html.escape(str(record.output))}</pre></td></tr></table>{error}"
        )
    elif tab == "nodes":
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td><td>{html.escape(str(d.get('kind')))}</td><td>{badge(str(d.get('status')))}</td>"
            f"<td>{d.get('executions', 0)}</td><td><pre>{html.escape(str(d.get('output') or ''))}</pre></td></tr>"
            for n, d in record.nodes.items()
        )
        content = _graph_svg(record.nodes, record.edges) + (
            "<table><tr><th>node</th><th>kind</th><th>status</th><th>runs</th><th>output</th></tr>"
            + rows
            + "</table>"
        )
    else:
        if record.nodes:
            sections = [
                f"<h3>{html.escape(n)}</h3>" + conversation(d.get("messages") or [])
                for n, d in record.nodes.items()
                if d.get("messages")
            ]
            content = "<div id='conversation'>" + ("".join(sections) or "<p>No messages.</p>") + "</div>"
        else:
            note = (
                f"<p class='note'>The caller sent {record.caller_history} earlier message(s) as history; "
                "stateless mode keeps none of them. Below is what this invocation added.</p>"
                if record.caller_history
                else ""
            )
            content = "<div id='conversation'>" + note + conversation(record.messages) + "</div>"
    return header + content
