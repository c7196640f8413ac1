"""A vended ``notebook`` tool: named text notes kept in ``agent.state``.

Because the notes live in the agent's state, they persist wherever the state does (a session, an
orchestrator snapshot) and the model never sees them unless it reads them through the tool.
"""

from __future__ import annotations

from typing import Literal

from orchestra.tools._tool import ToolContext, tool

__all__ = ["NOTEBOOK_STATE_KEY", "notebook"]

NOTEBOOK_STATE_KEY = "notebooks"


@tool(context=True)
def notebook(
    mode: Literal["create", "list", "read", "write", "delete"],
    tool_context: ToolContext,
    name: str = "default",
    new_str: str | None = None,
    old_str: str | None = None,
    insert_line: int | None = None,
) -> str:
    """Keep named text notes: create, list, read, write (replace, insert or append) and delete them.

    Args:
        mode: create a note, list the notes, read one, write to one, or delete one.
        name: the note's name.
        new_str: create: the note's initial text; write: the text to put in.
        old_str: write: the text to replace with new_str (must occur in the note).
        insert_line: write: insert new_str before this 1-based line instead of appending.
    """
    notes: dict[str, str] = tool_context.agent.state.get(NOTEBOOK_STATE_KEY) or {}
    if mode == "list":
        return "\n".join(sorted(notes)) if notes else "(no notes)"
    if mode == "create":
        if name in notes:
            raise ValueError(f"note {name!r} already exists; write to it or delete it first")
        notes[name] = new_str or ""
        result = f"Created note {name!r}."
    elif name not in notes:
        known = ", ".join(sorted(notes)) or "none"
        raise ValueError(f"no note named {name!r} (notes: {known})")
    elif mode == "read":
        return notes[name]
    elif mode == "delete":
        del notes[name]
        result = f"Deleted note {name!r}."
    else:  # write
        if new_str is None:
            raise ValueError("write needs new_str")
        text = notes[name]
        if old_str is not None:
            if old_str not in text:
                raise ValueError(f"old_str does not occur in note {name!r}")
            text = text.replace(old_str, new_str, 1)
        elif insert_line is not None:
            lines = text.splitlines()
            index = min(max(insert_line - 1, 0), len(lines))
            text = "\n".join([*lines[:index], new_str, *lines[index:]])
        else:
            text = f"{text}\n{new_str}" if text else new_str
        notes[name] = text
        result = f"Updated note {name!r}."
    tool_context.agent.state.set(NOTEBOOK_STATE_KEY, notes)
    return result
