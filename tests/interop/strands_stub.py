"""A Strands Agents ``Model`` that replays scripted turns, so a real Strands agent runs without a network."""

from __future__ import annotations

import json
from typing import Any

from strands.models.model import Model


class ScriptedStrandsModel(Model):
    """Each turn is a reply text, or a ``(tool name, tool use id, input)`` tool call."""

    def __init__(self, turns: list[str | tuple[str, str, dict[str, Any]]]) -> None:
        self.turns = list(turns)
        self.seen: list[list[dict[str, Any]]] = []  # the messages of every request

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> dict[str, Any]:
        return {}

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):  # type: ignore[no-untyped-def]
        raise NotImplementedError
        yield  # pragma: no cover

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):  # type: ignore[no-untyped-def]
        self.seen.append(list(messages))
        turn = self.turns.pop(0)
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(turn, str):
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": turn}}}
            stop = "end_turn"
        else:
            name, tool_use_id, tool_input = turn
            yield {"contentBlockStart": {"start": {"toolUse": {"name": name, "toolUseId": tool_use_id}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(tool_input)}}}}
            stop = "tool_use"
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": stop}}
        yield {
            "metadata": {
                "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
                "metrics": {"latencyMs": 1},
            }
        }
