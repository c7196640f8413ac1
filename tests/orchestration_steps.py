"""Function nodes and items the fan-out, retry and budget tests reach by import path
(``tests.orchestration_steps:split``). Each run is appended to ``$ORCHESTRA_TEST_CALLS`` (one
``os.write`` of a line with O_APPEND: atomic across threads and processes), so a test can count how
often each node, item or attempt ran across kills and resumes."""

from __future__ import annotations

import os
import time
from typing import Any


def record(line: str) -> None:
    calls = os.environ.get("ORCHESTRA_TEST_CALLS")
    if calls:
        fd = os.open(calls, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)


def split(node_input: Any) -> list[int]:
    """The list a map fans out over: $ORCHESTRA_TEST_ITEMS numbers (default 12)."""
    record(node_input.node_id)
    return list(range(int(os.environ.get("ORCHESTRA_TEST_ITEMS", "12"))))


def slow_item(node_input: Any) -> int:
    """A map item: records ``<node>[<index>]`` and takes $ORCHESTRA_TEST_STEP_SECONDS (default 0.05)."""
    record(f"{node_input.node_id}[{node_input.index}]")
    time.sleep(float(os.environ.get("ORCHESTRA_TEST_STEP_SECONDS", "0.05")))
    return int(node_input.item) * 2


def total(node_input: Any) -> int:
    record(node_input.node_id)
    (values,) = node_input.inputs.values()
    return sum(values)


def flaky(node_input: Any) -> str:
    """Fails its first $ORCHESTRA_TEST_FAILS attempts (default 2) with a RuntimeError; records each
    attempt as ``<node>:<attempt>`` and takes $ORCHESTRA_TEST_STEP_SECONDS."""
    record(f"{node_input.node_id}:{node_input.attempt}")
    time.sleep(float(os.environ.get("ORCHESTRA_TEST_STEP_SECONDS", "0.05")))
    if node_input.attempt <= int(os.environ.get("ORCHESTRA_TEST_FAILS", "2")):
        raise RuntimeError(f"{node_input.node_id} failed on attempt {node_input.attempt}")
    return f"{node_input.node_id} ok on attempt {node_input.attempt}"


def misconfigured(node_input: Any) -> str:
    from orchestra.errors import ConfigurationError

    record(f"{node_input.node_id}:{node_input.attempt}")
    raise ConfigurationError("no model named 'gpt-nope': check the model name")


def first_even_over_ten(items: list[Any]) -> bool:
    """A map's ``until`` join: an item whose output is over 10."""
    return any(item.output > 10 for item in items)


def mark(node_input: Any) -> str:
    """Records the node and returns its id (the migration tests' plain steps)."""
    record(node_input.node_id)
    return f"{node_input.node_id} done"


def approve(node_input: Any) -> str:
    """Asks a human, then records the node."""
    answer = node_input.interrupt("approve", reason="publish it?")
    record(node_input.node_id)
    return f"approved: {answer}"


def _draft_is_now_write(run: Any) -> None:
    run.rename_node("draft", "write")
    run.state["schema"] = 2


MIGRATIONS = {"v1": _draft_is_now_write}
"""What ``migrations: tests.orchestration_steps`` gives a pipeline (see tests/multiagent/test_migrations.py)."""


def groups(node_input: Any) -> list[list[int]]:
    """The list a map of maps fans out over: $ORCHESTRA_TEST_GROUPS groups (default 3) of 2, 3, 2, 3, ...
    numbers, each number once."""
    record(node_input.node_id)
    sizes = [2 + i % 2 for i in range(int(os.environ.get("ORCHESTRA_TEST_GROUPS", "3")))]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [list(range(start, start + size)) for start, size in zip(starts, sizes, strict=True)]


def inner_item(node_input: Any) -> int:
    """A nested map's item: records ``<node><<item>>`` (items are unique across groups) and takes
    $ORCHESTRA_TEST_STEP_SECONDS (default 0.05)."""
    record(f"{node_input.node_id}<{node_input.item}>")
    time.sleep(float(os.environ.get("ORCHESTRA_TEST_STEP_SECONDS", "0.05")))
    return int(node_input.item) * 10


def flat_total(node_input: Any) -> int:
    """The sum of a map of maps' outputs (lists of numbers)."""
    record(node_input.node_id)
    (groups_,) = node_input.inputs.values()
    return sum(sum(group) for group in groups_)


def group_of(node_input: Any) -> list[int]:
    """A graph run per item of a map: its item (the last line of its task, JSON) as a list."""
    import json

    return list(json.loads(str(node_input.task).rsplit("\n", 1)[-1]))


def number_of(node_input: Any) -> int:
    """A graph run per inner item of a map of maps: its item (the last line of its task), times 10;
    records ``g<<item>>``."""
    item = int(str(node_input.task).rsplit("\n", 1)[-1])
    record(f"g<{item}>")
    return item * 10
