"""Function nodes of the long-run tests (``tests.temporal.long_steps:lap``)."""

from __future__ import annotations

import os
from typing import Any

from tests.orchestration_steps import record


def lap(node_input: Any) -> str:
    """One lap of a loop: ``again`` until the node ran $ORCHESTRA_TEST_LAPS times, then ``done``; each run
    is recorded as ``<node>:<execution>`` (a lap that ran twice shows twice)."""
    record(f"{node_input.node_id}:{node_input.execution_count}")
    return "again" if node_input.execution_count < int(os.environ["ORCHESTRA_TEST_LAPS"]) else "done"


def slow_mark(node_input: Any) -> str:
    """Records the node, then takes $ORCHESTRA_TEST_STEP_SECONDS (default 0.3): a run can be stopped between
    nodes, or in one."""
    import time

    record(node_input.node_id)
    time.sleep(float(os.environ.get("ORCHESTRA_TEST_STEP_SECONDS", "0.3")))
    return f"{node_input.node_id} done"


def _look_up(topic: str) -> str:
    """Records ``tool@<pid>``, then takes $ORCHESTRA_TEST_TOOL_SECONDS (default 3): the worker that runs it
    can be killed in it."""
    import time

    record(f"tool@{os.getpid()}")
    time.sleep(float(os.environ.get("ORCHESTRA_TEST_TOOL_SECONDS", "3")))
    return f"facts about {topic}"


def _make_look_up() -> Any:
    from orchestra import tool

    return tool(name="look_up")(_look_up)


look_up = _make_look_up()


def counted_reply(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    """A model that records each call (``call``): a tool call first, then an answer."""
    from orchestra.testing import ToolCall

    record("call")
    if any(m["role"] == "user" and "toolResult" in m["content"][0] for m in messages):
        return "looked it up"
    return ToolCall("look_up", {"topic": "tides"})


def _helper_reply(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> str:
    users = [m for m in messages if m["role"] == "user"]
    return f"helped {len(users)} times"


def _make_helper() -> Any:
    from orchestra import Agent
    from orchestra.models import FunctionModel

    return Agent(name="helper", model=FunctionModel(_helper_reply))


helper = _make_helper()  # an agent used as a tool (by its import path): the node saves it with the run


def asks_helper(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    """A node's model: asks its helper tool once, then answers with what it said."""
    from orchestra.testing import ToolCall

    results = [b for m in messages for b in m["content"] if "toolResult" in b]
    if results and messages[-1]["role"] == "user" and "toolResult" in messages[-1]["content"][0]:
        return f"the helper says: {results[-1]['toolResult']['content'][0]['text']}"
    return ToolCall("helper", {"input": "help me"})


def rally(messages: list[dict[str, Any]], tool_specs: list[dict[str, Any]]) -> Any:
    """A swarm agent's model: hands the task to the other agent, counting down from
    $ORCHESTRA_TEST_HANDOFFS in each handoff's message (``left N``), then answers ``all done``. It reads
    the newest message only, so a conversation window (a long swarm keeps one) does not change a reply."""
    import re

    from orchestra.testing import ToolCall

    text = messages[-1]["content"][0]["text"]
    found = re.match(r"left (\d+)", text)
    left = int(found.group(1)) if found else int(os.environ["ORCHESTRA_TEST_HANDOFFS"])
    if left == 0:
        return "all done"
    other = re.search(r"You can hand off with \w+ to: (\w+)", text)
    assert other is not None, text
    return ToolCall("handoff_to_agent", {"agent_name": other.group(1), "message": f"left {left - 1}"})
