"""Function nodes of the waiting pipelines (tests/server/test_waits_across_servers.py, tests/test_waits.py):
each writes one line to the file ``ORCHESTRA_TEST_CALLS`` names, a side effect outside the run, so a test
counts executions across processes."""

from __future__ import annotations

import json
import os
from typing import Any

import orchestra

WAITING = """version: 1
kind: graph
id: {id}
nodes:
  - {{id: before, function: 'tests.server.wait_steps:before'}}
  - {{id: nap, wait: {{for: 1h}}}}
  - {{id: middle, function: 'tests.server.wait_steps:middle'}}
  - {{id: pay, wait: {{event: payment, timeout: 1d}}}}
  - {{id: after, function: 'tests.server.wait_steps:after'}}
edges:
  - {{from: before, to: nap}}
  - {{from: nap, to: middle}}
  - {{from: middle, to: pay}}
  - {{from: pay, to: after}}
"""


def _note(line: str) -> None:
    fd = os.open(os.environ["ORCHESTRA_TEST_CALLS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def calls(path: Any) -> list[str]:
    """The lines written so far."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().splitlines()
    except FileNotFoundError:
        return []


async def before(node_input: Any) -> str:
    _note("before")
    return "ordered"


async def middle(node_input: Any) -> str:
    _note("middle")
    return "slept"


async def after(node_input: Any) -> str:
    paid = node_input.inputs["pay"]
    _note(f"after {json.dumps(paid, sort_keys=True)}")
    return "shipped"


async def sleepy_twice(node_input: Any) -> str:
    """Sleeps twice in one execution, noting each step."""
    _note("start")
    await orchestra.sleep(60)
    _note("between")
    await orchestra.sleep(60)
    _note("end")
    return "rested"


REMINDER = """version: 1
kind: agent
id: reminder
agents:
  - name: reminder
    tools: ['tests.server.wait_steps:remind_later']
    model:
      provider: scripted
      follow_history: true
      replies:
        - {tool: remind_later, input: {text: call Bo}}
        - Reminded.
"""


@orchestra.tool
async def remind_later(text: str) -> str:
    """Remind later, durably.

    Args:
        text: what to remind of
    """
    await orchestra.sleep(3600)
    _note(f"reminded {text}")
    return f"reminded: {text}"
