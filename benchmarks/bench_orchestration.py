"""Orchestration overhead, measured on ScriptedModel/FunctionModel agents. One JSON object per workload.

- W1: a chain of 200 agent nodes: microseconds per node without a session manager, and with durable
  per-node saves on LocalFileStorage (plus bytes written and their ratio to the final state).
- W2: entry -> 100 parallel agents -> aggregator, 50 ms model latency: wall seconds.
- W4: a Swarm of 3 agents, 30 handoffs then an answer: seconds and model calls.
- W5: a 50-node chain whose node 25 raises on the first run, then resume: model calls on resume, status.

    python benchmarks/bench_orchestration.py [--workload W1 W2 W4 W5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import anyio

from orchestra import Agent
from orchestra.multiagent import Graph, Swarm
from orchestra.session import SnapshotSessionManager, export_scope
from orchestra.storage import LocalFileStorage
from orchestra.testing import CountingStorage, FunctionModel, ScriptedModel, ToolCall


def chain(n: int, **options: Any) -> Graph:
    agents = [Agent(name=f"n{i}", model=ScriptedModel([f"output of node {i}"])) for i in range(n)]
    edges = [(f"n{i}", f"n{i + 1}") for i in range(n - 1)]
    return Graph(agents, edges=edges, id="chain", **options)


async def w1(repeat: int) -> dict[str, Any]:
    nodes = 200
    plain = []
    for _ in range(repeat):
        graph = chain(nodes)
        started = time.perf_counter()
        result = await graph.invoke_async("run the chain")
        plain.append(time.perf_counter() - started)
        assert result.status.value == "completed"
    saved = []
    bytes_written = final_state = 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as root:
            storage = CountingStorage(LocalFileStorage(root))
            graph = chain(nodes, session_manager=SnapshotSessionManager("bench", storage=storage))
            started = time.perf_counter()
            result = await graph.invoke_async("run the chain")
            saved.append(time.perf_counter() - started)
            assert result.status.value == "completed"
            bytes_written = storage.bytes_written
            final_state = len(await export_scope(storage.inner, "bench", "multiAgent", "chain"))
    return {
        "workload": "W1",
        "nodes": nodes,
        "us_per_node_no_session": round(min(plain) / nodes * 1e6, 1),
        "ms_per_node_with_saves": round(min(saved) / nodes * 1e3, 3),
        "bytes_written": bytes_written,
        "final_state_bytes": final_state,
        "bytes_written_over_final_state": round(bytes_written / final_state, 3),
        "targets": {"us_per_node_no_session": 150, "ms_per_node_with_saves": 1.5, "bytes_ratio": 3},
    }


async def w2(repeat: int) -> dict[str, Any]:
    latency = 0.05
    times = []
    for _ in range(repeat):
        workers = [
            Agent(name=f"w{i}", model=ScriptedModel([f"part {i}"], latency=latency)) for i in range(100)
        ]
        entry = Agent(name="entry", model=ScriptedModel(["split"], latency=latency))
        aggregator = Agent(name="aggregator", model=ScriptedModel(["all parts"], latency=latency))
        edges = [("entry", w.name) for w in workers] + [(w.name, "aggregator") for w in workers]
        graph = Graph([entry, *workers, aggregator], edges=edges)
        started = time.perf_counter()
        result = await graph.invoke_async("fan out")
        times.append(time.perf_counter() - started)
        assert result.status.value == "completed"
        assert result.execution_count == 102
    return {
        "workload": "W2",
        "nodes": 102,
        "model_latency_s": latency,
        "wall_seconds": round(min(times), 4),
        "critical_path_s": 3 * latency,
        "target_wall_seconds": 0.17,
    }


async def w4(repeat: int) -> dict[str, Any]:
    names = ["a", "b", "c"]
    handoffs = 30
    times = []
    calls = 0
    for _ in range(repeat):
        models: list[FunctionModel] = []

        def make(name: str, models: list[FunctionModel] = models) -> Agent:
            def reply(messages: list[Any], specs: list[Any]) -> Any:
                prompt = messages[-1]["content"][-1].get("text", "")
                turn = prompt.count(" -> ") + 1 if "Agents so far:" in prompt else 0
                if turn >= handoffs:
                    return "the answer"
                following = names[(names.index(name) + 1) % len(names)]
                return ToolCall("handoff_to_agent", {"agent_name": following, "message": f"turn {turn}"})

            model = FunctionModel(reply)
            models.append(model)
            return Agent(name=name, model=model)

        swarm = Swarm([make(n) for n in names], max_handoffs=handoffs, max_iterations=handoffs + 1)
        started = time.perf_counter()
        result = await swarm.invoke_async("pass it around")
        times.append(time.perf_counter() - started)
        assert result.status.value == "completed", result.reason
        calls = sum(len(m.requests) for m in models)
    return {
        "workload": "W4",
        "handoffs": handoffs,
        "seconds": round(min(times), 4),
        "model_calls": calls,
        "target_model_calls": 31,
    }


async def w5() -> dict[str, Any]:
    nodes = 50
    calls = {"count": 0}
    state = {"fail": True}

    def make(i: int) -> Agent:
        def reply(messages: list[Any], specs: list[Any]) -> str:
            calls["count"] += 1
            if i == 25 and state["fail"]:
                raise RuntimeError("node 25 fails on the first run")
            return f"output {i}"

        return Agent(name=f"n{i}", model=FunctionModel(reply))

    with tempfile.TemporaryDirectory() as root:

        def build() -> Graph:
            agents = [make(i) for i in range(1, nodes + 1)]
            edges = [(f"n{i}", f"n{i + 1}") for i in range(1, nodes)]
            manager = SnapshotSessionManager("w5", storage=LocalFileStorage(root))
            return Graph(agents, edges=edges, id="w5", session_manager=manager)

        first = await build().invoke_async("the task")
        first_calls = calls["count"]
        state["fail"] = False
        calls["count"] = 0
        resumed = await build().invoke_async()
    return {
        "workload": "W5",
        "nodes": nodes,
        "first_run_status": first.status.value,
        "first_run_model_calls": first_calls,
        "model_calls_on_resume": calls["count"],
        "final_status": resumed.status.value.upper(),
        "target": {"model_calls_on_resume": 26, "final_status": "COMPLETED"},
    }


async def main(workloads: list[str], repeat: int) -> None:
    for workload in workloads:
        if workload == "W1":
            print(json.dumps(await w1(repeat)))
        elif workload == "W2":
            print(json.dumps(await w2(repeat)))
        elif workload == "W4":
            print(json.dumps(await w4(repeat)))
        elif workload == "W5":
            print(json.dumps(await w5()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", nargs="*", default=["W1", "W2", "W4", "W5"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    anyio.run(main, args.workload, args.repeat)
