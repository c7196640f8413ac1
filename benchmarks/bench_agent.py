"""Agent loop cost as the history grows: 300 turns on one agent, no persistence.

Prints one JSON object: total seconds, the mean turn time of the first and last 50 turns, and their
ratio (target <= 1.3: a turn must not get slower as the history grows to 600 messages).

    python benchmarks/bench_agent.py [--turns 300]
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args.turns)))


if __name__ == "__main__":
    main()
