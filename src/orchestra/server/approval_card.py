"""The dashboard's card for a tool's approval question (see ``orchestra.tools.approval``): the tool and
its arguments, and four forms, each answering the question with one decision (server-rendered, no
script): approve, always for this session, reject with a reason, edit the arguments (JSON) and run."""

from __future__ import annotations

import html
import json
from typing import Any

from orchestra.hosting.approvals import APPROVAL, parse_answer

__all__ = ["approval_answer", "approval_card"]


def _form(run: str, csrf: str, question_id: str, inner: str, button: str, button_id: str) -> str:
    return (
        f"<form class='control' method='post' action='/runs/{run}/respond'>"
        f"<input type='hidden' name='csrf' value='{html.escape(csrf)}'>"
        f"<input type='hidden' name='interrupt_id' value='{html.escape(question_id)}'>{inner}"
        f"<button type='submit' id='{button_id}'>{html.escape(button)}</button></form>"
    )


def approval_card(run: str, csrf: str, question: dict[str, Any], index: int) -> str | None:
    """The card of an approval question (``run`` already escaped), or None for any other question."""
    request = question.get("reason")
    if question.get("name") != APPROVAL or not isinstance(request, dict):
        return None
    qid = question["id"]
    tool = html.escape(str(request.get("tool")))
    arguments = html.escape(json.dumps(request.get("input"), indent=1))

    def decision(value: str) -> str:
        return f"<input type='hidden' name='decision' value='{value}'>"

    forms = [
        _form(run, csrf, qid, decision("approve"), "Approve", f"approve-{index}"),
        _form(run, csrf, qid, decision("always"), "Always for this session", f"always-{index}"),
        _form(
            run,
            csrf,
            qid,
            decision("reject")
            + f"<input name='reason' id='reject-reason-{index}' size='40' placeholder='why (the model sees it)'> ",
            "Reject",
            f"reject-{index}",
        ),
        _form(
            run,
            csrf,
            qid,
            decision("edit")
            + f"<textarea name='input' id='edit-input-{index}' rows='4' cols='50'>{arguments}</textarea> ",
            "Edit and run",
            f"edit-{index}",
        ),
    ]
    where = f" · node <b>{html.escape(str(question['node']))}</b>" if question.get("node") else ""
    return (
        f"<li class='interrupt approval' data-id='{html.escape(qid)}'><b>Approve tool call</b> "
        f"<b class='tool'>{tool}</b>{where}<pre class='arguments'>{arguments}</pre>"
        + "".join(forms)
        + "</li>"
    )


def approval_answer(form: dict[str, list[str]]) -> dict[str, Any]:
    """The answer a card's form gives; raises ``ValueError`` saying what is wrong with it (the edited
    arguments' fit to the tool's schema is checked when the answering run starts)."""
    answer: dict[str, Any] = {"decision": (form.get("decision") or [""])[0]}
    if answer["decision"] == "reject":
        answer["reason"] = (form.get("reason") or [""])[0].strip() or None
    if answer["decision"] == "edit":
        text = (form.get("input") or [""])[0]
        try:
            answer["input"] = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"the edited arguments are not JSON ({exc}): {text[:200]}") from None
    return parse_answer(answer).model_dump(exclude_none=True)
