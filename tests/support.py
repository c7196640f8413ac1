"""Helpers that tests (and YAML fixtures) reach by import path, e.g. ``tests.support:reply_fn``."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio


def reply_fn(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    return "from a function"


def spec_source(node_input: Any) -> str:
    return "APPROVED v2"


def spec_mark(node_input: Any) -> str:
    return f"ran {node_input.node_id}"


def ten_kb_output(node_input: Any) -> str:
    return f"{node_input.node_id} saw k={node_input.invocation_state['k']} " + "o" * 10_000


def spec_condition(state: Any, invocation_state: dict[str, Any]) -> bool:
    return bool(invocation_state.get("allow")) and state.text("source").startswith("APPROVED")


def slow_step(node_input: Any) -> str:
    """A function node that records each run in $ORCHESTRA_TEST_CALLS and takes a while."""
    import os
    import time

    calls = os.environ.get("ORCHESTRA_TEST_CALLS")
    if calls:
        fd = os.open(calls, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{node_input.node_id}\n".encode())
        os.close(fd)
    time.sleep(float(os.environ.get("ORCHESTRA_TEST_STEP_SECONDS", "0.3")))
    return f"{node_input.node_id} done"


def fail_unless_allowed(node_input: Any) -> str:
    import os

    if not os.environ.get("ORCHESTRA_TEST_ALLOW"):
        raise RuntimeError("not allowed yet")
    return "allowed"


def ask_human(node_input: Any) -> str:
    answer = node_input.interrupt("approve", reason="ship it?")
    return f"human said {answer}"


def echo_reply(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    """Answers with the newest user text and how many user turns the conversation holds."""
    users = [m for m in messages if m["role"] == "user" and any("text" in b for b in m["content"])]
    last = next(b["text"] for b in messages[-1]["content"] if "text" in b)
    if last == "EXPLODE":
        raise RuntimeError("the custom model's backend exploded")  # a custom model that raises
    if last == "RACE":
        _save_a_rival_turn()  # another process saves this session while this turn runs
    if last == os.environ.get("ORCHESTRA_TEST_DIE_AFTER_ANSWERING"):
        _die_after_answering()
    return f"echo: {last} (turn {len(users)})"


def _die_after_answering() -> None:
    """The server process running this turn is SIGKILLed right after it answers it 200: when a flush meets
    the turn's final run record (which is written after the answer), before it is written."""
    import signal
    import threading

    from orchestra.hosting.records import RunStore

    text = os.environ["ORCHESTRA_TEST_DIE_AFTER_ANSWERING"]
    writes = getattr(RunStore._flushed, "__wrapped__", RunStore._flushed)

    def flushed(self: RunStore, record: Any) -> list[tuple[str, bytes]]:
        # Checked per record as the flush writes it, so a record a running flush picked up is met too
        # (checking the queue when a flush starts missed it). The record is left out, as if the process
        # had died before writing it; the kill waits a second so that the turn's answer goes out first,
        # whichever request's flush met the record.
        if record.input == text and record.status == "completed":
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
            return []
        return writes(self, record)

    flushed.__wrapped__ = writes  # type: ignore[attr-defined]
    RunStore._flushed = flushed  # type: ignore[method-assign]


def _save_a_rival_turn() -> None:
    """As a second server process would: append a turn to the racing session (see test_concurrency)."""
    import os

    from orchestra import Agent
    from orchestra.session import SnapshotSessionManager
    from orchestra.storage import LocalFileStorage, PrefixedStorage

    root = os.environ["ORCHESTRA_TEST_RACE_STORE"]
    storage = PrefixedStorage(LocalFileStorage(root), "ws/acme/agents/chat")
    rival = Agent(model="echo", session_manager=SnapshotSessionManager("race", storage=storage))
    rival("the rival's turn")


def set_own_key(node_input: Any) -> str:
    """Marks the shared state with this node's id (parallel writers of different keys)."""
    node_input.state.set(node_input.node_id, f"set by {node_input.node_id}")
    return node_input.node_id


def delete_temp(node_input: Any) -> str:
    node_input.state.delete("temp")
    return "deleted temp"


def report_state(node_input: Any) -> str:
    """The shared state as this node sees it (sorted JSON)."""
    import json

    return json.dumps(node_input.state.to_dict(), sort_keys=True)


async def sleep_forever(node_input: Any) -> str:
    """Counts its executions in a file (``ORCHESTRA_TEST_COUNT_FILE``), then outlives any node_timeout."""
    import os

    import anyio

    # Written at once, on the loop (no worker-thread hop that a loaded machine could delay past the timeout).
    with open(os.environ["ORCHESTRA_TEST_COUNT_FILE"], "a") as counts:  # noqa: ASYNC230
        counts.write("ran\n")
    await anyio.sleep(3600)
    return "never"


# -- side-effecting tools on Temporal (tests/temporal/test_kill.py): the effect service's URL comes from
# $ORCHESTRA_TEST_EFFECTS_URL, and each tool call waits $ORCHESTRA_TEST_STEP_SECONDS after its effect.


def _send_effect(intent: str, tool_context: Any) -> str:
    """Carry out an intent through the effect service, with the call's idempotency key."""
    import os
    import time

    import httpx

    answer = httpx.post(
        os.environ["ORCHESTRA_TEST_EFFECTS_URL"],
        json={"intent": intent},
        headers={"Idempotency-Key": tool_context.idempotency_key},
    )
    time.sleep(float(os.environ.get("ORCHESTRA_TEST_STEP_SECONDS", "0.3")))
    return str(answer.json()["done"])


def _make_send_effect() -> Any:
    from orchestra import tool

    return tool(effects=True, context=True, on_unknown="retry", name="send")(_send_effect)


send_effect = _make_send_effect()


def effect_planner(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    """Three sends, two at a time then one, each call with a fresh id as real models give, then done."""
    import uuid

    from orchestra.testing import ToolCall

    prompt = max(i for i, m in enumerate(messages) if m["role"] == "user" and "text" in m["content"][0])
    batches = sum(1 for m in messages[prompt:] if m["role"] == "user" and "toolResult" in m["content"][0])

    def send(intent: str) -> Any:
        return ToolCall("send", {"intent": intent}, tool_use_id=f"call_{uuid.uuid4().hex[:12]}")

    if batches == 0:
        return [send("a"), send("b")]
    if batches == 1:
        return [send("c")]
    return "sent"


def _approve_payment(amount: int, tool_context: Any) -> str:
    """Pay ``amount`` once a human approves it.

    Args:
        amount: what to pay.
    """
    answer = tool_context.interrupt("approval", reason={"amount": amount})
    return f"paid {amount}" if answer == "yes" else f"not paid ({answer})"


def _make_approve_payment() -> Any:
    from orchestra import tool

    return tool(context=True, name="approve_payment")(_approve_payment)


approve_payment = _make_approve_payment()


async def cut_when(started: anyio.Event, call: Callable[[], Awaitable[Any]]) -> None:
    """Runs ``call`` and cancels it once ``started`` is set: a process killed at a chosen point of its
    work, whatever the machine's load (a cut after a fixed time may come before that point)."""

    async def run() -> None:
        await call()

    with anyio.fail_after(60):  # a guard against a hang, not a timing under test
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
