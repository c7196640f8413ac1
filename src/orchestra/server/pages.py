"""What the dashboard's pages share: the page frame, status badges, and a conversation as HTML."""

from __future__ import annotations

import html
import json
from typing import Any

from fastapi.responses import HTMLResponse

__all__ = ["STATUS_COLOURS", "badge", "conversation", "page"]

STATUS_COLOURS = {
    "completed": "#2e7d32",
    "failed": "#c62828",
    "interrupted": "#6a1b9a",
    "answered": "#4a148c",
    "executing": "#ef6c00",
    "pending": "#757575",
}
STYLE = """
form.inline { display: inline; } form.inline button { font: inherit; padding: 0 .3rem; }
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 1100px; }
a { color: #1565c0; } table { border-collapse: collapse; width: 100%; margin: 1rem 0; }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #ddd; vertical-align: top; }
.badge { color: white; border-radius: .3rem; padding: .1rem .45rem; font-size: .85em; }
.tabs a { margin-right: 1rem; } .tabs a.active { font-weight: bold; text-decoration: none; color: #222; }
.message { border: 1px solid #ddd; border-radius: .4rem; padding: .6rem; margin: .6rem 0; }
.message .role { font-weight: bold; text-transform: capitalize; } pre { white-space: pre-wrap; margin: .3rem 0; }
.tool { background: #f5f5f5; border-left: 3px solid #1565c0; padding: .3rem .6rem; margin: .3rem 0; }
.error { color: #c62828; } form.inline { display: inline; }
form.control { margin: .4rem 0; } .window { border-top: 2px dashed #1565c0; color: #1565c0; margin: 1rem 0; padding-top: .3rem; }
"""


def page(title: str, body: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)} · orchestra</title>"
        f"<style>{STYLE}</style></head><body>{body}</body></html>",
        status_code=status_code,
    )


def badge(status: str) -> str:
    colour = STATUS_COLOURS.get(status, "#455a64")
    return f"<span class='badge status' style='background:{colour}'>{html.escape(status)}</span>"


def _block(block: dict[str, Any]) -> str:
    if "text" in block:
        return f"<pre class='text'>{html.escape(block['text'])}</pre>"
    if "toolUse" in block:
        use = block["toolUse"]
        arguments = html.escape(json.dumps(use.get("input"), indent=1))
        return f"<div class='tool tool-call'>Tool call <b>{html.escape(use['name'])}</b><pre>{arguments}</pre></div>"
    if "toolResult" in block:
        result = block["toolResult"]
        parts = []
        for item in result.get("content", []):
            if "text" in item:
                parts.append(html.escape(item["text"]))
            elif "json" in item:
                parts.append(html.escape(json.dumps(item["json"])))
            else:
                parts.append("[binary content]")
        status = html.escape(result.get("status", ""))
        return f"<div class='tool tool-result'>Tool result ({status})<pre>{'<br>'.join(parts)}</pre></div>"
    for kind in ("image", "document"):
        if kind in block:
            return f"<div class='tool'>[{kind} {html.escape(str(block[kind].get('format', '')))}]</div>"
    return ""


def conversation(messages: list[dict[str, Any]]) -> str:
    if not messages:
        return "<p>No messages.</p>"
    return "".join(
        f"<div class='message {html.escape(m['role'])}'><div class='role'>{html.escape(m['role'])}</div>"
        + "".join(_block(b) for b in m.get("content", []))
        + "</div>"
        for m in messages
    )
