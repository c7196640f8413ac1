"""Pipelines the kill tests run in child processes: ``python -m tests.kill_pipelines graph|swarm ROOT SESSION CALLS``
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

from orchestra import Agent
from orchestra.multiagent import Graph, Swarm
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


def main() -> None:
    kind, root, session, calls = sys.argv[1:5]
    orchestrator = (build_graph if kind == "graph" else build_swarm)(root, session, calls)
    print("ready", flush=True)
    result = orchestrator("the task")
    summary = {
        "status": result.status.value,
        "output": result.output,
        "outputs": {n: r.output for n, r in result.results.items()},
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
