"""What ``orchestra sessions show`` says of a saved run besides its status: the version it is pinned to
and its migrations, what it spent against its budget, the nodes that were retried, the maps still in
progress, and what a swarm remembers across invocations (with ``history="private"``, each agent's own
history)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["run_details"]


def run_details(fields: Mapping[str, Any], logs: Mapping[str, list[Any]]) -> dict[str, Any]:
    """The details of a run document, only those it has (plain JSON, for tables and ``--json``)."""
    run = fields.get("run") or {}
    details: dict[str, Any] = {}
    for key in ("version", "migrations", "budget", "spent", "sticky"):
        if run.get(key):
            details[key] = run[key]
    attempts: dict[str, str] = {}
    for name, record in sorted(fields.items()):
        if not name.startswith("node/") or not isinstance(record, dict) or not record.get("attempts"):
            continue
        failed = record["attempts"]
        last = failed[-1]
        attempts[name[len("node/") :]] = (
            f"{len(failed)} failed attempt{'s' if len(failed) > 1 else ''} (last: {last.get('error')})"
        )
    if attempts:
        details["retried"] = attempts
    maps: dict[str, str] = {}
    for name, state in sorted(fields.items()):
        if not name.startswith("map/") or name.count("/") != 1 or not isinstance(state, dict):
            continue
        key = name[len("map/") :]
        prefix = f"map/{key}/item/"
        records = [r for n, r in fields.items() if n.startswith(prefix) and isinstance(r, dict)]
        done = sum(1 for r in records if r.get("status") == "completed")
        retrying = sum(1 for r in records if r.get("status") == "retrying")
        failed_items = sum(1 for r in records if r.get("status") == "failed")
        text = f"{done} of {state.get('count')} items completed"
        if retrying:
            text += f", {retrying} retrying"
        if failed_items:
            text += f", {failed_items} failed"
        maps[key] = text
    if maps:
        details["maps"] = maps
    if fields.get("last_active"):
        details["last_active"] = fields["last_active"]
    if logs.get("conversation"):
        details["conversation"] = f"{len(logs['conversation'])} earlier exchanges"
    if (run.get("sticky") or {}).get("history") == "private":
        histories = {
            name[len("agent/") : -len("/messages")]: _history(messages, fields.get(name[: -len("/messages")]))
            for name, messages in sorted(logs.items())
            if name.startswith("agent/") and name.endswith("/messages")
        }
        if histories:
            details["histories"] = histories
    return details


def _history(messages: list[Any], agent: Any) -> str:
    """An agent's own history, in a line: how long it is, its last reply, the keys of its state."""
    turns = sum(1 for m in messages if m.get("role") == "user" and any("text" in b for b in m["content"]))
    text = f"{len(messages)} messages, {turns} turn{'s' if turns != 1 else ''}"
    reply = next(
        (
            " ".join(b["text"] for b in m["content"] if "text" in b)
            for m in reversed(messages)
            if m.get("role") == "assistant" and any("text" in b for b in m["content"])
        ),
        None,
    )
    if reply:
        shown = " ".join(reply.split())
        text += f", last reply: {shown[:60] + '...' if len(shown) > 60 else shown}"
    state = (agent or {}).get("state") if isinstance(agent, dict) else None
    if state:
        text += f", state: {', '.join(sorted(state))}"
    return text
