"""The dashboard's run controls and session page (server-rendered forms, no script).

- A run that waits for a human lists its open interrupts (name, reason, the node or tool that asked),
  each with a form that answers it: the answer is read as JSON when it is JSON (``true``, ``42``,
  ``{"ok": 1}``) and as text otherwise, and starts a background run that answers it.
- A tool's approval question is a card (``approval_card.py``): the tool and its arguments, with
  **Approve**, **Always for this session**, **Reject** (with a reason) and **Edit and run** (the
  arguments as JSON, to change).
- A queued or executing run has a **Cancel** button; a cancelled, failed or stranded one a **Resume**.
- ``/sessions/<agent>/<session>`` shows a session's whole conversation, with a line where what the model
  is given begins (the conversation manager's window).

Every form carries a CSRF token bound to the login session (``SessionTokens.form_token``) and is refused
from another site.
"""

from __future__ import annotations

import hmac
import html
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from orchestra._ids import validate_id
from orchestra._logging import get_logger
from orchestra.errors import OrchestraError
from orchestra.hosting import Refused, RunRecord, RunService, UnknownSession, cancellable
from orchestra.server.approval_card import approval_answer, approval_card
from orchestra.server.pages import badge, conversation, page

__all__ = ["controls_html", "mount_controls"]

log = get_logger("orchestra.server")


def _form(action: str, csrf: str, inner: str, button: str, button_id: str) -> str:
    return (
        f"<form class='control' method='post' action='{html.escape(action)}'>"
        f"<input type='hidden' name='csrf' value='{html.escape(csrf)}'>{inner}"
        f"<button type='submit' id='{html.escape(button_id)}'>{html.escape(button)}</button></form>"
    )


def controls_html(record: RunRecord, csrf: str) -> str:
    """The forms a run's page shows, by its state (see the module docstring)."""
    run = html.escape(record.run_id)
    parts = []
    if record.interrupts:
        items = []
        for index, question in enumerate(record.interrupts):
            card = approval_card(run, csrf, question, index)
            if card is not None:  # a tool's approval: approve, reject, edit, always
                items.append(card)
                continue
            where = " · ".join(
                f"{label} <b>{html.escape(str(question[label]))}</b>"
                for label in ("node", "tool")
                if question.get(label)
            )
            reason = html.escape(json.dumps(question.get("reason"), indent=1))
            answer = (
                f"<input type='hidden' name='interrupt_id' value='{html.escape(question['id'])}'>"
                f"<textarea name='response' id='answer-{index}' rows='2' cols='50' required></textarea> "
            )
            items.append(
                f"<li class='interrupt' data-id='{html.escape(question['id'])}'><b>{html.escape(question['name'])}</b>"
                f" {where}<pre>{reason}</pre>"
                + _form(f"/runs/{run}/respond", csrf, answer, "Answer", f"answer-button-{index}")
                + "</li>"
            )
        parts.append("<h2>Open interrupts</h2><ul id='interrupts'>" + "".join(items) + "</ul>")
    if record.status in ("queued", "executing") and cancellable(record):
        parts.append(_form(f"/runs/{run}/cancel", csrf, "", "Cancel", "cancel"))
    elif _resumable(record):
        parts.append(_form(f"/runs/{run}/resume", csrf, "", "Resume", "resume"))
    if record.resumed_by:
        parts.append(
            f"<p>Resumed by <a href='/runs/{html.escape(record.resumed_by)}'>{html.escape(record.resumed_by)}</a></p>"
        )
    if record.stopped:
        by = html.escape(str(record.stopped.get("by")))
        note = html.escape(str(record.stopped.get("note") or ""))
        parts.append(f"<p class='stopped'>Stopped ({by}). {note}</p>")
    return "<div id='controls'>" + "".join(parts) + "</div>"


def _resumable(record: RunRecord) -> bool:
    """Whether ``resume_run`` would start it again (its checks, read from the record)."""
    return (
        record.status in ("interrupted", "failed")
        and not record.interrupts
        and record.resumed_by is None
        and (isinstance(record.input, str) or record.resume)
        and record.mode != "stateless"
    )


def _answer(text: str) -> Any:
    """A form's answer: JSON when it is JSON, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def mount_controls(
    app: FastAPI,
    runtime: RunService,
    workspace: Callable[[Request], str | None],
    form_token: Callable[[Request], str],
    same_origin: Callable[[Request], bool],
) -> None:
    """Add the routes of the module docstring to ``app``."""
    config = runtime.config

    async def checked(
        request: Request, run_id: str
    ) -> tuple[str, RunRecord, dict[str, list[str]]] | Response:
        """The workspace, the run and the form of a post, or the page that refuses it."""
        ws = workspace(request)
        if ws is None:
            return RedirectResponse("/login", status_code=303)
        form = parse_qs((await request.body()).decode("utf-8", errors="replace"))
        expected = form_token(request)
        if not same_origin(request) or not hmac.compare_digest((form.get("csrf") or [""])[0], expected):
            log.warning("dashboard.cross_site_post_refused")
            return page("Refused", "<p class='error'>A form from another site cannot change a run.</p>", 403)
        try:
            record = await runtime.run_record(ws, validate_id(run_id, "run_id"))
        except ValueError:
            record = None
        if record is None:
            return page(
                "Not found", f"<h1>No run {html.escape(run_id)}</h1><p><a href='/'>All runs</a></p>", 404
            )
        return ws, record, form

    def refused(message: str, run_id: str, status: int = 409) -> Response:
        link = f"<p><a href='/runs/{html.escape(run_id)}'>Back to the run</a></p>"
        return page("Refused", f"<p class='error' id='refused'>{html.escape(message)}</p>{link}", status)

    def hosted_of(ws: str, agent_id: str) -> Any:
        return next((h for h in config.agents if h.id == agent_id and h.workspace == ws), None)

    @app.post("/runs/{run_id}/respond", include_in_schema=False)
    async def respond(request: Request, run_id: str) -> Response:
        found = await checked(request, run_id)
        if isinstance(found, Response):
            return found
        ws, record, form = found
        hosted = hosted_of(ws, record.agent_id)
        interrupt_id = (form.get("interrupt_id") or [""])[0]
        if (
            hosted is None
            or record.session_id is None
            or interrupt_id not in {i["id"] for i in record.interrupts}
        ):
            return refused(f"run {run_id} does not wait for interrupt {interrupt_id!r}", run_id)
        if "decision" in form:
            try:
                answers = {interrupt_id: approval_answer(form)}
            except ValueError as exc:
                return refused(str(exc), run_id, 422)
        else:
            answers = {interrupt_id: _answer((form.get("response") or [""])[0])}
        try:
            new = await runtime.answer(ws, hosted, record.session_id, answers)
        except Refused as exc:
            return refused(exc.message, run_id, exc.status)
        return RedirectResponse(f"/runs/{new.run_id}", status_code=303)

    @app.post("/runs/{run_id}/cancel", include_in_schema=False)
    async def cancel(request: Request, run_id: str) -> Response:
        found = await checked(request, run_id)
        if isinstance(found, Response):
            return found
        ws, record, _ = found
        if record.final or not cancellable(record):
            return refused(f"run {run_id} has ended ({record.status}) or stops with its client", run_id)
        await runtime.cancel(ws, record)
        return RedirectResponse(f"/runs/{record.run_id}", status_code=303)

    @app.post("/runs/{run_id}/resume", include_in_schema=False)
    async def resume(request: Request, run_id: str) -> Response:
        found = await checked(request, run_id)
        if isinstance(found, Response):
            return found
        ws, record, _ = found
        hosted = hosted_of(ws, record.agent_id)
        if hosted is None:
            return refused(f"agent {record.agent_id!r} is no longer hosted", run_id)
        try:
            new = await runtime.resume(ws, record, hosted)
        except Refused as exc:
            return refused(exc.message, run_id)
        return RedirectResponse(f"/runs/{new.run_id}", status_code=303)

    @app.get("/sessions/{agent_id}/{session_id}", include_in_schema=False)
    async def session_page(request: Request, agent_id: str, session_id: str) -> Response:
        ws = workspace(request)
        if ws is None:
            return RedirectResponse("/login", status_code=303)
        missing = page(
            "Not found", f"<h1>No session {html.escape(session_id)}</h1><p><a href='/'>All runs</a></p>", 404
        )
        if hosted_of(ws, agent_id) is None:
            return missing
        try:
            scopes = await runtime.describe_session(ws, agent_id, validate_id(session_id, "session_id"))
        except (UnknownSession, OrchestraError, ValueError):  # (a damaged one too)
            return missing
        sections = []
        for scope in scopes:
            if scope.kind == "agent":
                messages, start = scope.messages or [], scope.context_start or 0
                window = (
                    "<div id='window-start' class='window'>The model is given the messages from here on"
                    f" ({len(messages) - start} of {len(messages)}).</div>"
                )
                sections.append(
                    "<div id='conversation'>"
                    + conversation(messages[:start])
                    + (window if start else "")
                    + conversation(messages[start:])
                    + "</div>"
                )
            else:
                status = str((scope.summary or {}).get("status", ""))
                sections.append(f"<p>Pipeline {html.escape(scope.scope_id)}: {badge(status)}</p>")
        runs_link = f"/?agent_id={html.escape(agent_id)}&session_id={html.escape(session_id)}"
        body = (
            f"<p><a href='/'>All runs</a> · <a href='{runs_link}'>this session's runs</a></p>"
            f"<h1>Session {html.escape(session_id)}</h1><p>{html.escape(agent_id)}</p>" + "".join(sections)
        )
        return page(f"Session {session_id}", body)
