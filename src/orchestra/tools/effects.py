"""Side-effecting tools run once: idempotency keys, and the ledger of a turn's tool calls.

**Keys.** Every tool call has an idempotency key, ``ToolContext.idempotency_key``, derived from where its
agent's turn is stored (the session and the scope: ``agent.effect_scope``) and the model's tool-call id. It
is the same on every execution of that call: after a crash, on a node retry, on a Temporal activity retry,
after a resume in another process. Pass it on to what the tool changes: an ``Idempotency-Key`` header, a
database unique key, an S3 ``If-None-Match: *`` put under a key named after it.

**The ledger.** While a turn's tools run, the agent keeps them in its ledger (``PendingTools``, saved with
the agent as ``interrupt_state``): the calls, the results so far, and the side-effecting calls that
started. A tool declared ``@tool(effects=True)`` is marked started, and the turn made durable (the model's
tool calls and the ledger, through the ``TurnCheckpoint`` hook), before it runs; its result is made durable
before the model sees it. A turn resumed after a crash returns a recorded result instead of running the
tool again. A call that started but has no result (the process died during it) has an unknown outcome,
decided by the tool's ``on_unknown``:

- ``"interrupt"`` (the default, the safe one): the turn stops with an interrupt named ``outcome_unknown``
  for a human: the response becomes the tool's result, or ``{"retry": true}`` runs it again with the same
  key;
- ``"retry"``: run it again with the same key (for tools whose service honours the key);
- ``"error"``: the model gets an error result saying the outcome is unknown.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

__all__ = ["UNKNOWN_OUTCOME", "OnUnknown", "idempotency_key", "unknown_outcome_reason", "wants_retry"]

OnUnknown = Literal["interrupt", "retry", "error"]
"""What a resumed turn does with a side-effecting call whose outcome is unknown (see the module docstring)."""

UNKNOWN_OUTCOME = "outcome_unknown"
"""The name of the interrupt a side-effecting call with an unknown outcome raises (``on_unknown="interrupt"``)."""


def idempotency_key(scope: str | None, tool_use_id: str) -> str:
    """The key of one tool call: the same for the same scope and tool-call id, in any process."""
    digest = hashlib.sha256(f"{scope or ''}\x00{tool_use_id}".encode()).hexdigest()[:40]
    return f"oc-{digest}"


def unknown_outcome_reason(tool_use: dict[str, Any], key: str) -> dict[str, Any]:
    """What the ``outcome_unknown`` interrupt and error result say about the call."""
    return {
        "tool": tool_use["name"],
        "input": tool_use.get("input"),
        "idempotency_key": key,
        "message": (
            f"the side-effecting tool {tool_use['name']!r} started but its process stopped before it "
            "returned: it may or may not have taken effect"
        ),
    }


def wants_retry(response: Any) -> bool:
    """Whether a human's response to ``outcome_unknown`` asks to run the call again (with its key)."""
    return isinstance(response, dict) and response.get("retry") is True
