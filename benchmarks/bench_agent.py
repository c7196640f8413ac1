"""Agent loop cost as the history grows: 300 turns on one agent, no persistence.

Prints one JSON object: total seconds, the mean turn time of the first and last 50 turns, and their
ratio (target <= 1.3: a turn must not get slower as the history grows to 600 messages).

With ``--long``, a second object: 5,000 turns (a 10,000-message conversation) with the test model,
the mean call of the first and last 100 turns, their ratio, and the process's peak RSS (the test
models used to copy the whole history on every call).

    python benchmarks/bench_agent.py [--turns 300] [--long]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import anyio

from orchestra import Agent
from orchestra.conversation import NullConversationManager
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--long", action="store_true", help="also run the 10,000-message conversation")
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args.turns)))
    if args.long:
        print(json.dumps(anyio.run(run_long)))


if __name__ == "__main__":
    main()
