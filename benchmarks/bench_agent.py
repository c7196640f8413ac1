"""Agent loop cost as the history grows: 300 turns on one agent, no persistence.

Prints one JSON object: total seconds, the mean turn time of the first and last 50 turns, and their
ratio (target <= 1.3: a turn must not get slower as the history grows to 600 messages).

Then one invocation beside its floor, measured in the same run: the floor is the same turn without a
framework (the prompt and the reply validated as messages, as W1's floor does, and the same scripted
model's stream read into the reply), so the ratio is what the agent's loop, hooks and result add to a
model call; beside it, the model call alone (plain dicts, nothing validated). Rounds alternate, best of
7, in CPU time (the machine is shared).

With ``--long``, a second object: 5,000 turns (a 10,000-message conversation) with the test model,
the mean call of the first and last 100 turns, their ratio, and the process's peak RSS (the test
models used to copy the whole history on every call).

With ``--tracing``, the cost of OpenTelemetry tracing per turn (a tool call and an answer: two model
calls, one tool), each setup in fresh processes, alternated, best of 5: the ``[otel]`` extra absent (as
if not installed: nothing imported), the API installed with no SDK configured (no-op spans), and the
SDK recording to memory. The ratios are to "absent"; "absent_again" measures the noise of the same setup.

With ``--effects``, the cost of the effect ledger (``@tool(effects=True)``) per tool-calling turn (a tool
call and an answer), on local files (durable: fsynced) and in memory, with a session saving per
invocation. The floor is the same turn with the same tool not declared side-effecting; the ledger adds two
saves a call (before it runs, and its result before the model sees it). Cases alternate, best of 3.

    python benchmarks/bench_agent.py [--turns 300] [--long] [--tracing] [--effects]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

import anyio

from orchestra import Agent
from orchestra.conversation import NullConversationManager
from orchestra.messages import validate_message
from orchestra.models import TextDelta
from orchestra.testing import ScriptedModel


async def run(turns: int) -> dict[str, float]:
    model = ScriptedModel([f"reply number {i}" for i in range(turns)])
    agent = Agent(model=model, conversation_manager=NullConversationManager())
    durations = []
    started = time.perf_counter()
    for i in range(turns):
        t0 = time.perf_counter()
        await agent.invoke_async(f"turn number {i}")
        durations.append(time.perf_counter() - t0)
    total = time.perf_counter() - started
    first = sum(durations[:50]) / 50
    last = sum(durations[-50:]) / 50
    return {
        "benchmark": "agent_turns",
        "turns": turns,
        "messages": len(agent.messages),
        "total_seconds": round(total, 4),
        "first_50_mean_ms": round(first * 1000, 4),
        "last_50_mean_ms": round(last * 1000, 4),
        "last_50_over_first_50": round(last / first, 3),
    }


async def _floor_turns(turns: int, validate: bool) -> float:
    """CPU seconds for ``turns`` turns without a framework: the prompt, the model's stream read into a
    reply, the reply (both validated as messages with ``validate``)."""
    model = ScriptedModel([f"reply number {i}" for i in range(turns)])
    check = validate_message if validate else dict
    messages: list[Any] = []
    started = time.process_time()
    for i in range(turns):
        messages.append(check({"role": "user", "content": [{"text": f"turn number {i}"}]}))
        text = [event.text async for event in model.stream(messages) if isinstance(event, TextDelta)]
        messages.append(check({"role": "assistant", "content": [{"text": "".join(text)}]}))
    return time.process_time() - started


async def _agent_turns(turns: int) -> float:
    """CPU seconds for ``turns`` invocations of an agent (the same model and prompts, no session)."""
    model = ScriptedModel([f"reply number {i}" for i in range(turns)])
    agent = Agent(model=model, conversation_manager=NullConversationManager())
    started = time.process_time()
    for i in range(turns):
        await agent.invoke_async(f"turn number {i}")
    return time.process_time() - started


def run_invocation_cost(turns: int = 1000, rounds: int = 7) -> dict[str, Any]:
    floor, model, agent = [], [], []
    for _ in range(rounds):  # alternated: the machine's noise hits all three
        floor.append(anyio.run(_floor_turns, turns, True))
        model.append(anyio.run(_floor_turns, turns, False))
        agent.append(anyio.run(_agent_turns, turns))
    us_floor, us_model, us_agent = (min(times) / turns * 1e6 for times in (floor, model, agent))
    return {
        "benchmark": "agent_invocation_cost",
        "turn": "a prompt, one model call, a reply of text; no session",
        "floor_us_per_turn_no_framework": round(us_floor, 1),
        "model_call_alone_us": round(us_model, 1),
        "agent_us_per_invocation": round(us_agent, 1),
        "agent_over_floor": round(us_agent / us_floor, 2),
        "agent_over_model_call_alone": round(us_agent / us_model, 2),
    }


async def run_long(turns: int = 5000) -> dict[str, float]:
    model = ScriptedModel([f"r{i}" for i in range(turns)])
    agent = Agent(model=model, conversation_manager=NullConversationManager())
    durations = []
    for i in range(turns):
        t0 = time.perf_counter()
        await agent.invoke_async(f"u{i}")
        durations.append(time.perf_counter() - t0)
    first = sum(durations[:100]) / 100
    last = sum(durations[-100:]) / 100
    return {
        "benchmark": "agent_long_conversation",
        "messages": len(agent.messages),
        "first_100_mean_us": round(first * 1e6, 1),
        "last_100_mean_us": round(last * 1e6, 1),
        "last_100_over_first_100": round(last / first, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


_TRACING_RUN = """
import sys, time, anyio
setup = sys.argv[1]
if setup == "absent":
    sys.modules["opentelemetry"] = None  # as if the [otel] extra were not installed
elif setup == "sdk":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)
from orchestra import Agent, tool
from orchestra.conversation import NullConversationManager
from orchestra.testing import ScriptedModel, ToolCall

@tool
def add(a: int, b: int) -> int:
    \"\"\"Add.

    Args:
        a: first
        b: second
    \"\"\"
    return a + b

async def main(turns):
    replies = [r for i in range(turns) for r in (ToolCall("add", {"a": i, "b": 1}), f"done {i}")]
    agent = Agent(model=ScriptedModel(replies), tools=[add], conversation_manager=NullConversationManager())
    started = time.perf_counter()
    for i in range(turns):
        await agent.invoke_async(f"turn {i}")
    print((time.perf_counter() - started) / turns * 1e6)
anyio.run(main, int(sys.argv[2]))
"""


def run_tracing(turns: int = 400, rounds: int = 5) -> dict[str, Any]:
    import subprocess
    import sys

    setups = ["absent", "absent_again", "noop", "sdk"]
    best: dict[str, float] = {}
    for _ in range(rounds):
        for setup in setups:
            real = "absent" if setup == "absent_again" else setup
            out = subprocess.run(
                [sys.executable, "-c", _TRACING_RUN, real, str(turns)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            best[setup] = min(best.get(setup, float("inf")), float(out))
    return {
        "benchmark": "agent_tracing_cost",
        "turn": "one tool call + one answer (2 model calls)",
        **{f"{setup}_us_per_turn": round(best[setup], 1) for setup in setups},
        **{f"{setup}_over_absent": round(best[setup] / best["absent"], 3) for setup in setups[1:]},
    }


async def effects_turns(turns: int, effects: bool, storage: str, root: str) -> float:
    """Microseconds per tool-calling turn, with or without the ledger."""
    from orchestra import ToolContext, tool
    from orchestra.session import SnapshotSessionManager
    from orchestra.storage import InMemoryStorage, LocalFileStorage
    from orchestra.testing import ToolCall

    @tool(effects=effects, context=True)
    def send(n: int, tool_context: ToolContext) -> str:
        """Send."""
        return f"sent {n} with {tool_context.idempotency_key}"

    replies = [r for i in range(turns) for r in (ToolCall("send", {"n": i}), f"done {i}")]
    store = LocalFileStorage(root) if storage == "local" else InMemoryStorage()
    agent = await Agent.create(
        model=ScriptedModel(replies),
        tools=[send],
        conversation_manager=NullConversationManager(),
        session_manager=SnapshotSessionManager("bench", storage=store),
    )
    started = time.perf_counter()
    for i in range(turns):
        await agent.invoke_async(f"turn {i}")
    return (time.perf_counter() - started) / turns * 1e6


def run_effects(turns: int = 200, rounds: int = 3) -> list[dict[str, Any]]:
    import tempfile

    out = []
    for storage in ("local", "memory"):
        best = {"ledger": float("inf"), "plain": float("inf")}
        for _ in range(rounds):
            for case in ("plain", "ledger"):  # alternated: the machine's noise hits both
                with tempfile.TemporaryDirectory() as root:
                    figure = anyio.run(effects_turns, turns, case == "ledger", storage, root)
                best[case] = min(best[case], figure)
        out.append(
            {
                "benchmark": "effect_ledger_cost",
                "storage": "local files (fsync)" if storage == "local" else "memory",
                "turn": "one tool call + one answer, saved per invocation",
                "floor_plain_tool_us_per_turn": round(best["plain"], 1),
                "ledger_us_per_turn": round(best["ledger"], 1),
                "ledger_over_floor": round(best["ledger"] / best["plain"], 3),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--long", action="store_true", help="also run the 10,000-message conversation")
    parser.add_argument("--tracing", action="store_true", help="also measure what tracing costs per turn")
    parser.add_argument("--effects", action="store_true", help="also measure the effect ledger per turn")
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args.turns)))
    print(json.dumps(run_invocation_cost()))
    if args.long:
        print(json.dumps(anyio.run(run_long)))
    if args.tracing:
        print(json.dumps(run_tracing()))
    if args.effects:
        for figures in run_effects():
            print(json.dumps(figures))


if __name__ == "__main__":
    main()
