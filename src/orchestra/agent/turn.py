"""An agent's turn: its tool ledger, the checkpoint an invocation starts from, and how an invocation starts.

A turn is a prompt and what follows it, up to the model's reply that calls no tool. It is *closed* when
the history ends with that reply; otherwise it is *open*: a process was killed in the middle of it, a
failure came after one of its side-effecting tools ran, or its tools wait for interrupt responses.

- ``PendingTools`` is the ledger of the turn's current round of tool calls: the calls, their results so
  far, the questions they asked, the side-effecting calls that started, and a prompt that waits for the
  turn. It is saved with the agent (``interrupt_state``); ``agent.pending_tools`` shows it.
- ``Checkpoint`` is where an invocation started; a failure rolls the history back to it, so the history
  only ever holds whole turns (or a turn kept open on purpose, see ``Checkpoint.keep_open_turn``).
- ``start_turn`` decides how an invocation begins: with a new prompt, with answers to the turn's
  interrupts, or by finishing an open turn first (the new prompt then waits in the ledger's ``queued``).
- ``restored_turn`` decides what a stored history and ledger become when an agent is loaded: a turn a
  killed process left open is kept to be resumed (or dropped), anything else broken is refused.

Nothing here calls a hook or touches storage (it logs a turn it resumes or drops): the loop
(``_loop.py``) and the sessions do, with these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestra.agent.protocol import AgentLike
from orchestra.errors import AgentError, SnapshotError
from orchestra.history import is_blank_text, repair_history, unfinished_turn
from orchestra.interrupts import Interrupt, interrupt_responses, is_interrupt_responses
from orchestra.messages import MessageDict, ToolResultDict, validate_message
from orchestra.tools.approval import APPROVAL, approval_id, check_answer

if TYPE_CHECKING:
    from orchestra.conversation import ConversationManager
    from orchestra.tools import ToolRegistry

__all__ = [
    "Checkpoint",
    "PendingTools",
    "TurnAgent",
    "TurnStart",
    "open_turn",
    "prompt_messages",
    "restored_turn",
    "start_turn",
    "turn_closed",
]


class TurnAgent(AgentLike, Protocol):
    """What the loop and the turn's state use of an agent (an ``Agent``): ``AgentLike`` and its tools,
    conversation manager, cycle limit, ledger, and whether it resumes open turns."""

    conversation_manager: ConversationManager
    max_cycles: int
    pending_tools: PendingTools | None
    resume_turns: bool

    @property
    def tool_registry(self) -> ToolRegistry: ...


class PendingTools:
    """A turn's tool calls while they run (its ledger), and after an interrupt stopped them: persisted with
    the agent's state as ``interrupt_state``, so that a resumed turn runs only what is left.

    Attributes:
        tool_uses: the model's tool calls, in order.
        completed: the results so far, by tool-use id.
        interrupts: the questions raised, by interrupt id (with their responses once given).
        started: the side-effecting calls that began (``@tool(effects=True)``); one with no result has an
            unknown outcome (see ``orchestra.tools.effects``).
        queued: a prompt that came while this turn was open (after a killed process) and waits for it:
            it runs once the turn is finished, in the invocation that answers the interrupts.
    """

    def __init__(
        self,
        tool_uses: list[dict[str, Any]],
        completed: dict[str, ToolResultDict] | None = None,
        interrupts: dict[str, Interrupt] | None = None,
        started: set[str] | None = None,
        queued: list[MessageDict] | None = None,
    ) -> None:
        self.tool_uses = tool_uses
        self.completed = completed if completed is not None else {}
        self.interrupts = interrupts if interrupts is not None else {}
        self.started = started if started is not None else set()
        self.queued = queued if queued is not None else []

    def to_dict(self) -> dict[str, Any]:
        out = {
            "tool_uses": self.tool_uses,
            "completed": self.completed,
            "interrupts": {k: v.model_dump(mode="json") for k, v in self.interrupts.items()},
        }
        if self.started:
            out["started"] = sorted(self.started)
        if self.queued:
            out["queued"] = self.queued
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingTools:
        return cls(
            list(data["tool_uses"]),
            dict(data["completed"]),
            {k: Interrupt.model_validate(v) for k, v in data["interrupts"].items()},
            set(data.get("started", ())),
            list(data.get("queued", ())),
        )

    def copy(self) -> PendingTools:
        """An independent copy (the loop changes ``completed`` and the interrupts' responses in place)."""
        return PendingTools.from_dict(self.to_dict())

    def open_interrupts(self) -> list[Interrupt]:
        """The questions that have no answer yet."""
        return [i for i in self.interrupts.values() if i.response is None]

    def waiting(self) -> list[dict[str, Any]]:
        """The calls that have no result yet, in order."""
        return [t for t in self.tool_uses if t["toolUseId"] not in self.completed]

    def results(self) -> list[ToolResultDict]:
        """Every call's result, in the order of the calls (once none is waiting)."""
        return [self.completed[t["toolUseId"]] for t in self.tool_uses]


class Checkpoint:
    """What an invocation started from, so that a turn that does not finish leaves no trace.

    Every way an invocation can fail (a model error, ``MaxCyclesError``, a cancellation or timeout, an
    abandoned stream) rolls the history back to this point: the history then holds only whole turns,
    which every provider accepts (see ``orchestra.history``). Taking it costs O(1); a full copy of the
    history is made only if the conversation manager is about to reshape it (a context overflow).
    """

    __slots__ = (
        "_agent",
        "_closed",
        "_dropped",
        "_length",
        "_manager_state",
        "_messages",
        "_pending",
        "kept_open",
    )

    def __init__(self, agent: TurnAgent) -> None:
        self._agent = agent
        self._length = len(agent.messages)
        pending = agent.pending_tools
        self._pending = pending.copy() if pending is not None else None
        self._messages: list[MessageDict] | None = None
        self._manager_state: dict[str, Any] | None = None
        self._dropped = 0  # how many dropped messages there were at a reshape
        self._closed = False
        self.kept_open = False

    def before_reshape(self) -> None:
        """Called before the conversation manager rewrites earlier messages."""
        if self._messages is None:
            agent = self._agent
            self._messages = agent.messages[: self._length]
            self._manager_state = agent.conversation_manager.get_state()
            dropped = agent.dropped_messages
            self._dropped = len(dropped) if dropped is not None else 0

    def close(self) -> None:
        """The invocation finished: nothing to roll back any more."""
        self._closed = True

    def keep_open_turn(self, pending: PendingTools) -> None:
        """A side-effecting tool is about to run: from now on a failure does not roll the turn back, it
        leaves it open (the history up to the model's tool calls, and ``pending``, the live ledger) for the
        next invocation to resume, so the effect is never lost nor run twice."""
        self._length = len(self._agent.messages)
        self._pending = pending
        self._messages = self._manager_state = None
        self.kept_open = True

    def roll_back(self) -> bool:
        """Put the history and the interrupt state back as they were (once); whether anything was done."""
        if self._closed:
            return False
        self._closed = True
        agent = self._agent
        if self._messages is not None:
            agent.messages[:] = self._messages
            if self._manager_state is not None:
                agent.conversation_manager.restore_state(self._manager_state)
            dropped = agent.dropped_messages
            if dropped is not None:
                del dropped[self._dropped :]  # they are back in the history
        else:
            del agent.messages[self._length :]
        agent.pending_tools = self._pending
        return True


def prompt_messages(prompt: Any) -> list[MessageDict]:
    """The messages a prompt adds: a string, a list of content blocks, or a list of messages."""
    if isinstance(prompt, str) and prompt.strip():  # the common case, without a validation
        return [{"role": "user", "content": [{"text": prompt}]}]
    messages = _prompt_messages(prompt)
    for message in messages:
        if any(is_blank_text(block) for block in message["content"]) or not message["content"]:
            raise ValueError(
                "a prompt must not be blank (no provider accepts an empty text block); pass None to "
                "continue from the current history"
            )
    return messages


def _prompt_messages(prompt: Any) -> list[MessageDict]:
    if prompt is None:
        return []
    if isinstance(prompt, str):
        return [{"role": "user", "content": [{"text": prompt}]}]
    if isinstance(prompt, dict) and "role" in prompt:
        return [validate_message(prompt)]
    if isinstance(prompt, Sequence) and prompt:
        if all(isinstance(item, dict) and "role" in item for item in prompt):
            return [validate_message(item) for item in prompt]
        return [validate_message({"role": "user", "content": list(prompt)})]
    raise ValueError(
        "a prompt is a string, a list of content blocks, a list of messages or None; "
        f"got {type(prompt).__name__}"
    )


def turn_closed(messages: list[MessageDict]) -> bool:
    """Whether the history ends with the assistant's reply that calls no tool (a finished turn)."""
    last = messages[-1] if messages else None
    return (
        last is not None
        and last["role"] == "assistant"
        and not any("toolUse" in block for block in last["content"])
    )


def open_turn(messages: list[MessageDict], pending: PendingTools | None) -> int | None:
    """Where an open turn starts in ``messages`` (the index of its prompt), or None (see the module
    docstring). A turn whose tools wait for interrupt responses is not open here: it waits for answers."""
    if pending is not None and pending.open_interrupts():
        return None
    if pending is None and turn_closed(messages):  # the common case, checked per invocation in O(1)
        return None
    kept, _ = unfinished_turn(messages, interrupted=pending is not None)
    if kept < len(messages):
        return kept
    if pending is None:
        return None
    for index in range(len(messages) - 1, -1, -1):  # the prompt of the turn the ledger belongs to
        message = messages[index]
        if message["role"] == "user" and not any("toolResult" in b for b in message["content"]):
            return index
    return 0


def restored_turn(
    agent: TurnAgent, messages: list[MessageDict], interrupt_state: dict[str, Any] | None
) -> tuple[list[MessageDict], PendingTools | None]:
    """The history and the ledger ``agent`` gets from stored ones (``Agent.load_agent_data``).

    A process killed in the middle of a turn may have saved part of it: it is kept for the next invocation
    to resume (or, without ``resume_turns``, dropped, unless a side-effecting tool of it started: then it
    is always resumed, so that the effect runs once). Any other broken rule is damage, which is refused
    rather than cut away with what follows it.

    Raises:
        SnapshotError: the history breaks a rule before its last turn.
    """
    pending = PendingTools.from_dict(interrupt_state) if interrupt_state else None
    if not messages:  # nothing to check (an orchestrator resets its agents to this on every run)
        return [], pending
    messages = list(messages)
    kept, damage = unfinished_turn(messages, interrupted=pending is not None)
    if damage:
        raise SnapshotError(
            f"agent {agent.name!r}: the stored history breaks its rules at messages[{kept}] ({damage[0]}), "
            "which is more than the unfinished last turn a killed process leaves: it is damaged. "
            "Nothing was loaded; restore it from an export or an immutable snapshot"
        )
    keep = kept < len(messages) and (agent.resume_turns or (pending is not None and bool(pending.started)))
    restored = list(repair_history(messages, interrupted=pending is not None, keep_unfinished=keep))
    if keep:
        last = restored[-1]
        calls = [b["toolUse"] for b in last["content"] if "toolUse" in b]
        if pending is None and last["role"] == "assistant" and calls:
            pending = PendingTools(calls)  # the model's calls, none run yet
        agent.log.info("history_open_turn_kept", open_messages=len(messages) - kept)
    elif kept < len(messages):
        agent.log.warning("history_unfinished_turn_dropped", dropped=len(messages) - kept, kept=kept)
    return restored, pending


@dataclass
class TurnStart:
    """How an invocation starts (``start_turn``).

    Attributes:
        prompt: the messages to add to the history now.
        queued: a prompt that waits until the open turn is finished.
        resumed: the invocation first finishes a turn that was left open.
    """

    prompt: list[MessageDict]
    queued: list[MessageDict]
    resumed: bool


def start_turn(agent: TurnAgent, prompt: Any) -> TurnStart:
    """How an invocation of ``agent`` with ``prompt`` starts; answers to interrupts are recorded in the
    ledger (the invocation's checkpoint holds a copy to roll back to).

    Raises:
        AgentError: answers that the agent does not wait for, or a prompt while it waits for answers.
        InvalidApproval: an answer to a tool's approval that does not fit (see ``orchestra.tools.approval``).
        ValueError: a prompt that is not one (see ``prompt_messages``).
    """
    pending = agent.pending_tools
    if not isinstance(prompt, str) and is_interrupt_responses(prompt):
        if pending is None:
            raise AgentError(f"agent {agent.name!r} got interrupt responses but is not interrupted")
        for interrupt_id, response in interrupt_responses(prompt).items():
            if interrupt_id not in pending.interrupts:
                raise AgentError(f"agent {agent.name!r} has no open interrupt {interrupt_id!r}")
            pending.interrupts[interrupt_id].response = response
        _check_approvals(agent, pending)
        return TurnStart([], list(pending.queued), bool(pending.queued))  # the queued prompt runs after
    opened = open_turn(agent.messages, pending)
    if opened is not None:
        # A turn left open (a killed process, or a failure after a side effect) is finished first. The
        # same prompt again is the caller's retry of it; another prompt runs after it.
        new = prompt_messages(prompt)
        same = not new or new == agent.messages[opened : opened + len(new)]
        agent.log.info("turn_resumed", open_messages=len(agent.messages) - opened)
        return TurnStart([], [] if same else new, True)
    if pending is not None:
        open_ids = ", ".join(i.id for i in pending.open_interrupts())
        raise AgentError(
            f"agent {agent.name!r} is interrupted and waits for responses to {open_ids}; invoke it with "
            "[{'interruptResponse': {'interruptId': ..., 'response': ...}}]"
        )
    return TurnStart(prompt_messages(prompt), [], False)


def _check_approvals(agent: TurnAgent, pending: PendingTools) -> None:
    """Refuse an answer to a tool's approval that cannot be used, before anything runs (the invocation's
    checkpoint then puts the question back, open)."""
    for use in pending.tool_uses:
        question = pending.interrupts.get(approval_id(use["toolUseId"]))
        if question is not None and question.name == APPROVAL and question.response is not None:
            check_answer(agent.tool_registry.get(use["name"]), use["name"], question.response)
