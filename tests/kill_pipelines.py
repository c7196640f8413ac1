"""Pipelines the kill tests run in child processes:
``python -m tests.kill_pipelines graph|swarm|map|retry|budget ROOT SESSION CALLS [MODEL_CALLS]``
(ROOT: a folder, or any storage URI).

Every model call appends the node's name to the CALLS file (one ``os.write`` of a line with O_APPEND,
atomic even across threads), so the parent can count how often each node ran across kills and resumes.
The run's result is printed as JSON on the last line.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from typing import Any

import anyio

from orchestra import Agent
from orchestra.multiagent import Budget, Graph, Map, RetryPolicy, Swarm
from orchestra.session import SnapshotSessionManager
from orchestra.storage import storage_from_uri
from orchestra.testing import FunctionModel, ToolCall

FAN_OUT = [f"a{i}" for i in range(10)]
CHAIN = [f"c{i}" for i in range(18)]
SWARM = ["alpha", "beta", "gamma"]
SWARM_HANDOFFS = 30


def _record(calls: str, line: str) -> None:
    fd = os.open(calls, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def build_graph(root: str, session: str, calls: str, latency: float = 0.01) -> Graph:
    """30 nodes: start -> 10 parallel analysts -> join -> a chain of 18."""

    def agent(name: str) -> Agent:
        def reply(messages: list[Any], specs: list[Any]) -> str:
            _record(calls, name)
            return f"{name} ok"

        return Agent(name=name, model=FunctionModel(reply, latency=latency))

    names = ["start", *FAN_OUT, "join", *CHAIN]
    edges = [("start", a) for a in FAN_OUT] + [(a, "join") for a in FAN_OUT]
    edges += [("join", CHAIN[0]), *list(itertools.pairwise(CHAIN))]
    manager = SnapshotSessionManager(session, storage=storage_from_uri(root))
    return Graph([agent(n) for n in names], edges=edges, id="kill-graph", session_manager=manager)


def build_swarm(root: str, session: str, calls: str, latency: float = 0.01) -> Swarm:
    """Three agents passing the task around 30 times, then answering."""

    def agent(name: str) -> Agent:
        def reply(messages: list[Any], specs: list[Any]) -> Any:
            prompt = messages[-1]["content"][-1].get("text", "")
            turn = prompt.count(" -> ") + 1 if "Agents so far:" in prompt else 0
            _record(calls, f"{name}:{turn}")
            if turn >= SWARM_HANDOFFS:
                return f"{name} answers after {turn} handoffs"
            following = SWARM[(SWARM.index(name) + 1) % len(SWARM)]
            return ToolCall("handoff_to_agent", {"agent_name": following, "message": f"turn {turn}"})

        return Agent(name=name, model=FunctionModel(reply, latency=latency))

    manager = SnapshotSessionManager(session, storage=storage_from_uri(root))
    return Swarm(
        [agent(n) for n in SWARM],
        max_handoffs=50,
        max_iterations=50,
        id="kill-swarm",
        session_manager=manager,
    )


MAP_ITEMS = 40


def build_map(root: str, session: str, calls: str, latency: float = 0.03) -> Graph:
    """split -> a map of 40 agent items, 4 at a time -> total."""

    def split() -> list[str]:
        return [f"item {i}" for i in range(MAP_ITEMS)]

    def reply(messages: list[Any], specs: list[Any]) -> str:
        prompt = messages[-1]["content"][-1]["text"]
        item = prompt.rsplit("\n", 1)[-1]
        _record(calls, f"each[{item.split()[1]}]")
        return item.upper()

    def total(node_input: Any) -> str:
        return " / ".join(node_input.inputs["each"])

    agent = Agent(name="reader", model=FunctionModel(reply, latency=latency))
    manager = SnapshotSessionManager(session, storage=storage_from_uri(root))
    return Graph(
        {"split": split, "each": Map(agent, max_concurrency=4), "total": total},
        [("split", "each"), ("each", "total")],
        id="kill-map",
        session_manager=manager,
    )


RETRY_CHAIN = [f"r{i}" for i in range(6)]


def build_retry(root: str, session: str, calls: str) -> Graph:
    """A chain of 6 function nodes that each fail their first two attempts."""

    def step(name: str) -> Any:
        async def run(node_input: Any) -> str:
            _record(calls, f"{name}:{node_input.attempt}")
            await anyio.sleep(0.02)
            if node_input.attempt < 3:
                raise RuntimeError(f"{name} attempt {node_input.attempt} failed")
            return f"{name} ok"

        return run

    manager = SnapshotSessionManager(session, storage=storage_from_uri(root))
    policy = RetryPolicy(max_attempts=3, initial_interval=0.02, jitter=0, retry_on=(RuntimeError,))
    return Graph(
        {name: step(name) for name in RETRY_CHAIN},
        list(itertools.pairwise(RETRY_CHAIN)),
        id="kill-retry",
        retry=policy,
        session_manager=manager,
    )


BUDGET_CHAIN = [f"b{i}" for i in range(20)]


def build_budget(root: str, session: str, calls: str, model_calls: int = 12) -> Graph:
    """A chain of 20 agent nodes (one model call each) under a budget of ``model_calls``."""

    def agent(name: str) -> Agent:
        def reply(messages: list[Any], specs: list[Any]) -> str:
            _record(calls, name)
            return f"{name} ok"

        return Agent(name=name, model=FunctionModel(reply, latency=0.02))

    manager = SnapshotSessionManager(session, storage=storage_from_uri(root))
    return Graph(
        [agent(n) for n in BUDGET_CHAIN],
        list(itertools.pairwise(BUDGET_CHAIN)),
        id="kill-budget",
        budget=Budget(model_calls=model_calls),
        session_manager=manager,
    )


def main() -> None:
    kind, root, session, calls = sys.argv[1:5]
    builders: dict[str, Any] = {
        "graph": build_graph,
        "swarm": build_swarm,
        "map": build_map,
        "retry": build_retry,
        "budget": build_budget,
    }
    extra = [int(sys.argv[5])] if len(sys.argv) > 5 else []
    orchestrator = builders[kind](root, session, calls, *extra)
    print("ready", flush=True)
    result = orchestrator("the task")
    summary = {
        "status": result.status.value,
        "output": result.output,
        "outputs": {n: r.output for n, r in result.results.items()},
    }
    if kind == "budget":
        summary = {
            "status": result.status.value,
            "reason": result.reason,
            "spent": orchestrator.run.get("spent"),
        }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
