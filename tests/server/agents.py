"""Models, tools and nodes that the server tests' specs name by import path (``tests.server.agents:...``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio

from orchestra import ToolContext, tool


def _users(messages: list[dict[str, Any]]) -> int:
    return len([m for m in messages if m["role"] == "user" and any("text" in b for b in m["content"])])


async def slow_echo(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    """Answers like ``tests.support:echo_reply`` after ``ORCHESTRA_TEST_DELAY`` seconds (0.3), so that
    runs of one session overlap. With ``ORCHESTRA_TEST_GATES`` (a folder) it instead writes
    ``entered-<text>`` there and waits for ``open-<text>``: a test orders two turns by events, not by time."""
    last = next(b["text"] for b in messages[-1]["content"] if "text" in b)
    gates = os.environ.get("ORCHESTRA_TEST_GATES")
    if gates:
        (Path(gates) / f"entered-{last}").touch()
        while not (Path(gates) / f"open-{last}").exists():  # noqa: ASYNC110 (another process writes it)
            await anyio.sleep(0.01)
    else:
        await anyio.sleep(float(os.environ.get("ORCHESTRA_TEST_DELAY", "0.3")))
    return f"echo: {last} (turn {_users(messages)})"


async def chunky(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> list[str]:
    """Eight text chunks after a short wait: a stream with many events."""
    await anyio.sleep(float(os.environ.get("ORCHESTRA_TEST_DELAY", "0.05")))
    last = next((b["text"] for b in messages[-1]["content"] if "text" in b), "")
    return [f"part {i} of {last[:20]}; " for i in range(8)]


@tool(context=True)
def approve_payment(amount: int, tool_context: ToolContext) -> str:
    """Pay ``amount`` once a human approves it.

    Args:
        amount: what to pay.
    """
    answer = tool_context.interrupt("approval", reason={"amount": amount})
    return f"paid {amount}" if answer == "yes" else f"not paid ({answer})"


async def wait_step(node_input: Any) -> str:
    """A function node that takes ``ORCHESTRA_TEST_STEP`` seconds (0.2)."""
    await anyio.sleep(float(os.environ.get("ORCHESTRA_TEST_STEP", "0.2")))
    return f"{node_input.node_id} done"


def review(node_input: Any) -> str:
    """A human approves the draft (an interrupt of a function node)."""
    answer = node_input.interrupt("approve", reason="ship it?")
    return f"human said {answer}"


@tool(effects=True)
def pay_once(amount: int) -> str:
    """Pay ``amount`` (a side effect: counted in the file ``ORCHESTRA_TEST_PAID`` names).

    Args:
        amount: what to pay.
    """
    with open(os.environ["ORCHESTRA_TEST_PAID"], "a") as paid:
        paid.write(f"{amount}\n")
    return f"paid {amount}"


@tool
async def confirm() -> str:
    """Confirm the payment (takes ``ORCHESTRA_TEST_HANG`` seconds)."""
    await anyio.sleep(float(os.environ.get("ORCHESTRA_TEST_HANG", "0")))
    return "confirmed"


def _transfer(amount: int, tool_context: ToolContext) -> str:
    """Record the transfer under its idempotency key in ``ORCHESTRA_TEST_LEDGER`` (a service that honours
    the key counts the keys), then die with the process if the file ``ORCHESTRA_TEST_DIE`` exists (it is
    removed first: one kill)."""
    with open(os.environ["ORCHESTRA_TEST_LEDGER"], "a") as ledger:
        ledger.write(f"{tool_context.idempotency_key} {amount}\n")
    die = os.environ.get("ORCHESTRA_TEST_DIE")
    if die and os.path.exists(die):
        os.remove(die)
        os.kill(os.getpid(), signal.SIGKILL)
    return f"transferred {amount}"


@tool(effects=True, context=True, on_unknown="retry")
def transfer(amount: int, tool_context: ToolContext) -> str:
    """Transfer ``amount`` (run again with its key when its outcome is unknown).

    Args:
        amount: what to transfer.
    """
    return _transfer(amount, tool_context)


@tool(effects=True, context=True)
def transfer_asking(amount: int, tool_context: ToolContext) -> str:
    """Transfer ``amount`` (a human is asked when its outcome is unknown).

    Args:
        amount: what to transfer.
    """
    return _transfer(amount, tool_context)


def transferring(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    """A prompt ``transfer N`` (or ``ask N``: with ``transfer_asking``) calls the tool once; its result
    is answered ``done: <prompt>``; any other prompt is echoed."""
    from orchestra.testing import ToolCall

    prompt_at = max(i for i, m in enumerate(messages) if m["role"] == "user" and "text" in m["content"][0])
    prompt = messages[prompt_at]["content"][0]["text"]
    if prompt_at < len(messages) - 1:
        return f"done: {prompt}"
    verb, _, amount = prompt.partition(" ")
    if verb in ("transfer", "ask"):
        name = "transfer" if verb == "transfer" else "transfer_asking"
        return ToolCall(name, {"amount": int(amount)}, tool_use_id=f"call-{prompt_at}")
    return f"echo: {prompt}"


@tool(context=True)
def advance(stage: str, tool_context: ToolContext, finish: bool = False) -> str:
    """Move the work to ``stage`` (the agent's state: what an AG-UI client shows).

    Args:
        stage: the new stage.
        finish: whether this is the last stage (drops the scratch keys, marks it done).
    """
    state = tool_context.agent.state
    state.set("stage", stage)
    steps = state.get("steps") or []
    state.set("steps", [*steps, {"stage": stage, "at": len(steps) + 1}])
    if finish:
        state.delete("scratch")
        state.set("reviewer", None)
        state.set("a/b~c", {"escaped": True})
    return f"now {stage}"


def shared_stage(node_input: Any) -> str:
    """A function node that moves a pipeline's shared state along (one key per node, and a counter)."""
    node_input.state.set("stage", node_input.node_id)
    node_input.state.set("done", [*(node_input.state.get("done") or []), node_input.node_id])
    if node_input.node_id == "publish":
        node_input.state.delete("draft")
    else:
        node_input.state.set("draft", f"v{len(node_input.state.get('done'))}")
    return node_input.node_id


async def gate_step(node_input: Any) -> str:
    """A function node that waits until the file ``ORCHESTRA_TEST_GATE`` names exists (a test opens it)."""
    gate = anyio.Path(os.environ["ORCHESTRA_TEST_GATE"])
    with anyio.fail_after(60):
        while not await gate.exists():  # noqa: ASYNC110 - the test creates a file, it sets no event
            await anyio.sleep(0.02)
    return f"{node_input.node_id} done"


async def counted_echo(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    """Answers like ``slow_echo``, and writes each call's text to the file ``ORCHESTRA_TEST_CALLS`` names
    (one line per model call, from any process). A text that starts with ``slow`` first waits until the
    file ``ORCHESTRA_TEST_GATE`` names exists, if it is set, else ``ORCHESTRA_TEST_DELAY`` seconds (2)."""
    last = next(b["text"] for b in messages[-1]["content"] if "text" in b)
    fd = os.open(os.environ["ORCHESTRA_TEST_CALLS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{last}\n".encode())
    finally:
        os.close(fd)
    if last.startswith("slow"):
        gate = os.environ.get("ORCHESTRA_TEST_GATE")
        if gate is None:
            await anyio.sleep(float(os.environ.get("ORCHESTRA_TEST_DELAY", "2")))
        else:
            opened = anyio.Path(gate)
            for _ in range(12_000):  # a minute at most
                if await opened.exists():
                    break
                await anyio.sleep(0.005)
    return f"echo: {last} (turn {_users(messages)})"
