"""OpenAIModel's cost per call against a local Chat Completions server (real HTTP, SSE streaming).

Prints one JSON object with microseconds per call for:

- ``pooled``: ``OpenAIModel`` as it is now (one connection pool per event loop);
- ``client_per_call``: a new ``httpx.AsyncClient`` for every call (what the model did before);
- ``floor``: the same streaming POST with one shared ``httpx.AsyncClient`` and no framework at all;

and the ratios ``pooled / floor`` and ``client_per_call / pooled``. The server is the same local
stand-in the provider tests use (``tests/models/servers.py``), so only the client side differs.

    python benchmarks/bench_providers.py [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestra.messages import user_message
from orchestra.models import complete_text
from orchestra.models.openai import OpenAIModel
from tests.models.servers import ChatCompletionsServer

MESSAGES = [user_message("hello")]


async def timed(calls: int, once: Any) -> float:
    for _ in range(10):  # warm up: connections, imports, caches
        await once()
    started = time.perf_counter()
    for _ in range(calls):
        await once()
    return (time.perf_counter() - started) / calls * 1e6


async def run(calls: int) -> dict[str, Any]:
    with ChatCompletionsServer() as server:
        url = f"{server.url}/v1"
        server.queue(*(ChatCompletionsServer.text("hi") for _ in range(3 * (calls + 10))))
        pooled = OpenAIModel("m", base_url=url, api_key="k")

        async def call_pooled() -> None:
            await complete_text(pooled, MESSAGES)

        async def call_with_new_client() -> None:
            async with httpx.AsyncClient() as client:
                model = OpenAIModel("m", base_url=url, api_key="k", http_client=client)
                await complete_text(model, MESSAGES)

        body = pooled.request_body(MESSAGES)
        async with httpx.AsyncClient() as shared:

            async def call_bare() -> None:
                async with shared.stream("POST", f"{url}/chat/completions", json=body) as response:
                    async for _ in response.aiter_lines():
                        pass

            floor = await timed(calls, call_bare)
            pooled_us = await timed(calls, call_pooled)
            per_call_us = await timed(calls, call_with_new_client)
    return {
        "benchmark": "openai_model_per_call",
        "calls": calls,
        "pooled_us": round(pooled_us, 1),
        "client_per_call_us": round(per_call_us, 1),
        "floor_us": round(floor, 1),
        "pooled_over_floor": round(pooled_us / floor, 2),
        "client_per_call_over_pooled": round(per_call_us / pooled_us, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args.calls)))


if __name__ == "__main__":
    main()
