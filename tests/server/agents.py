"""Models, tools and nodes that the server tests' specs name by import path (``tests.server.agents:...``)."""

from __future__ import annotations

import os
from typing import Any

import anyio

from orchestra import ToolContext, tool


def _users(messages: list[dict[str, Any]]) -> int:
    return len([m for m in messages if m["role"] == "user" and any("text" in b for b in m["content"])])


async def slow_echo(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    """Answers like ``tests.support:echo_reply`` after ``ORCHESTRA_TEST_DELAY`` seconds (0.3), so that
    runs of one session overlap."""
    await anyio.sleep(float(os.environ.get("ORCHESTRA_TEST_DELAY", "0.3")))
    last = next(b["text"] for b in messages[-1]["content"] if "text" in b)
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
