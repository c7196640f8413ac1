"""Dynamic fan-out: one summarizer per document, 3 at a time, then an editor (Python version of
examples/graphs/map_summaries.yaml). Run: python examples/python/map_summaries.py"""

from __future__ import annotations

import sys
from pathlib import Path

from orchestra import Agent, FunctionModel, ScriptedModel
from orchestra.multiagent import Graph, Map, RetryPolicy

sys.path.insert(0, str(Path(__file__).parent.parent / "graphs"))
from pipeline_functions import first_sentence, split_documents


def build() -> Graph:
    summarizer = Agent(
        name="summarizer",
        system_prompt="Summarise the document you are given in one sentence.",
        model=FunctionModel(first_sentence, latency=0.2),
    )
    editor = Agent(
        name="editor",
        system_prompt="You merge summaries into one short paragraph.",
        model=ScriptedModel(
            ["Run batch work on spot capacity with checkpoints and bounded queues, retries and budgets."]
        ),
    )
    return Graph(
        {
            "split": split_documents,
            "summarize": Map(summarizer, over="split", max_concurrency=3),
            "editor": editor,
        },
        [("split", "summarize"), ("summarize", "editor")],
        id="map-summaries",
        # Throttled or unavailable models, and slow items, are tried again (4 attempts in all).
        retry={"summarize": RetryPolicy(max_attempts=4, initial_interval=0.5, retry_on=_retried())},
    )


def _retried() -> tuple[type[BaseException], ...]:
    from orchestra.errors import ModelThrottledError, ModelUnavailableError

    return (ModelThrottledError, ModelUnavailableError, TimeoutError)


if __name__ == "__main__":
    result = build()("Summarise the notes on running batch jobs cheaply.")
    print(result.status.value, result.execution_order)
    for summary in result.results["summarize"].output:
        print(" -", summary)
    print(result.output)
