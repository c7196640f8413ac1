"""The history invariant: the shape of a conversation that every provider accepts as a request's start.

After every invocation, whatever happened, ``agent.messages`` satisfies these rules (the union of what
Amazon Bedrock's Converse API and OpenAI's Chat Completions API enforce):

1. the first message is a user message, and roles alternate user / assistant;
2. no message is empty and no text block is blank (only whitespace);
3. an assistant message's toolUse blocks (unique ids, names matching ``TOOL_NAME_PATTERN``) are answered
   by the very next message, a user message holding exactly one toolResult per toolUse and no other
   toolResult;
4. the history ends with an assistant message that calls no tool; the exceptions are an interrupted
   agent, whose last message holds the tool calls that wait for the interrupt responses, and an agent
   holding an open turn (one a killed process left, see ``Agent(resume_turns=...)``), which its next
   invocation finishes before anything else is sent.

``history_problems`` names every broken rule; ``repair_history`` makes a stored history (one that a
killed process saved in the middle of a turn, or an older version wrote) satisfy them again, and
``unfinished_turn`` tells what it would drop apart from damage: a killed process leaves at most one
unfinished turn at the end, never a broken rule before it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from orchestra.messages import MessageDict

__all__ = [
    "EMPTY_REPLY",
    "EMPTY_TOOL_OUTPUT",
    "TOOL_NAME_PATTERN",
    "history_problems",
    "is_blank_text",
    "repair_history",
    "unfinished_turn",
]

TOOL_NAME_PATTERN = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""What both providers accept as a tool name (matched in full)."""

EMPTY_REPLY = "(empty reply)"
"""Stored in place of an empty model reply: no provider accepts a blank assistant message."""

EMPTY_TOOL_OUTPUT = "(no output)"
"""Stored in place of a tool's empty result text."""


def is_blank_text(block: dict[str, Any]) -> bool:
    """Whether a content block is a text block that holds only whitespace."""
    text = block.get("text")
    return isinstance(text, str) and not text.strip()


def _tool_use_ids(message: MessageDict) -> list[str]:
    return [block["toolUse"]["toolUseId"] for block in message["content"] if "toolUse" in block]


def _tool_result_ids(message: MessageDict) -> list[str]:
    return [block["toolResult"]["toolUseId"] for block in message["content"] if "toolResult" in block]


def _message_problems(index: int, message: MessageDict) -> list[str]:
    where = f"messages[{index}]"
    problems = []
    if not message["content"]:
        problems.append(f"{where} ({message['role']}) has no content")
    for j, block in enumerate(message["content"]):
        if is_blank_text(block):
            problems.append(f"{where}.content[{j}] is a blank text block")
        if "toolUse" in block and not TOOL_NAME_PATTERN.fullmatch(block["toolUse"]["name"]):
            problems.append(f"{where}.content[{j}] calls a tool named {block['toolUse']['name']!r}")
        if "toolResult" in block:
            for k, part in enumerate(block["toolResult"]["content"]):
                if is_blank_text(part):
                    problems.append(f"{where}.content[{j}].toolResult.content[{k}] is blank text")
    return problems


def _problems_at(messages: Sequence[MessageDict], i: int) -> list[str]:
    """The rules message ``i`` breaks, judged with the message before it only."""
    message = messages[i]
    problems = _message_problems(i, message)
    uses = _tool_use_ids(message)
    if len(set(uses)) != len(uses):
        problems.append(f"messages[{i}] repeats a toolUseId")
    if i == 0:
        if message["role"] != "user":
            problems.append("messages[0] is not a user message")
        elif _tool_result_ids(message):
            problems.append("messages[0] answers tool calls that nothing made")
        return problems
    previous = messages[i - 1]
    if message["role"] == previous["role"]:
        problems.append(f"messages[{i - 1}] and messages[{i}] are both {message['role']} messages")
    elif message["role"] == "user":
        results, asked = sorted(_tool_result_ids(message)), sorted(_tool_use_ids(previous))
        if results != asked:
            problems.append(f"messages[{i}] answers tool calls {results} but messages[{i - 1}] made {asked}")
    return problems


def _ending_problems(messages: Sequence[MessageDict], interrupted: bool) -> list[str]:
    if not messages:
        return []
    last = messages[-1]
    if last["role"] != "assistant":
        return [f"the history ends with a {last['role']} message, not the assistant's reply"]
    if _tool_use_ids(last) and not interrupted:
        return ["the history ends with tool calls that have no results"]
    return []


def history_problems(messages: Sequence[MessageDict], *, interrupted: bool = False) -> list[str]:
    """Every rule of the invariant that ``messages`` breaks (an empty list when it holds).

    Args:
        messages: the history, in the plain form.
        interrupted: the agent waits for interrupt responses, so the last message may hold tool calls.
    """
    problems = [problem for i in range(len(messages)) for problem in _problems_at(messages, i)]
    return problems + _ending_problems(messages, interrupted)


def _closed_length(messages: Sequence[MessageDict], interrupted: bool) -> int:
    """The length of the longest prefix that breaks no rule (one pass)."""
    closed = 0
    for i, message in enumerate(messages):
        if _problems_at(messages, i):
            break
        waiting = interrupted and i == len(messages) - 1
        if message["role"] == "assistant" and not _ending_problems(messages[i : i + 1], waiting):
            closed = i + 1
    return closed


def _without_blank_text(message: MessageDict) -> MessageDict:
    content: list[dict[str, Any]] = []
    changed = False
    for block in message["content"]:
        if is_blank_text(block):
            changed = True
            continue
        result = block.get("toolResult")
        if result is not None and any(is_blank_text(part) for part in result["content"]):
            parts = [{"text": EMPTY_TOOL_OUTPUT} if is_blank_text(p) else p for p in result["content"]]
            block = {"toolResult": {**result, "content": parts}}
            changed = True
        content.append(block)
    if not changed:
        return message
    if not content and message["role"] == "assistant":
        content = [{"text": EMPTY_REPLY}]
    return {**message, "content": content}


def repair_history(
    messages: list[MessageDict], *, interrupted: bool = False, keep_unfinished: bool = False
) -> list[MessageDict]:
    """``messages`` made to satisfy the invariant: blank text replaced, an unfinished last turn dropped
    (or kept, with ``keep_unfinished``, for an agent that resumes it).

    Returns the same list object when nothing needed repair (the common case costs one scan).
    """
    cleaned = [_without_blank_text(m) for m in messages]
    if keep_unfinished or not history_problems(cleaned, interrupted=interrupted):
        return messages if all(a is b for a, b in zip(cleaned, messages, strict=True)) else cleaned
    return cleaned[: _closed_length(cleaned, interrupted)]


def unfinished_turn(messages: list[MessageDict], *, interrupted: bool = False) -> tuple[int, list[str]]:
    """Where ``repair_history`` would cut ``messages``, and whether only an unfinished turn is cut.

    Returns:
        ``(kept, damage)``: ``repair_history`` keeps ``kept`` messages. The ones after them are the turn a
        killed process left unfinished if ``damage`` is empty (they break no rule, they only lack an
        ending); otherwise ``damage`` lists the rules they break, which no killed writer leaves.
    """
    cleaned = [_without_blank_text(m) for m in messages]
    kept = _closed_length(cleaned, interrupted)
    return kept, [problem for i in range(kept, len(cleaned)) for problem in _problems_at(cleaned, i)]
