"""Tracing: run a pipeline with OpenTelemetry and print its spans as a tree (needs the otel extra: pip install -e '.[otel]').
To send them to a collector instead: orchestra run examples/graphs/fan_out.yaml --otlp-endpoint URL.
Run: python examples/python/traced_run.py"""

from __future__ import annotations

from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orchestra import load


def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    pipeline = load(Path(__file__).parent.parent / "graphs" / "fan_out.yaml")
    result = pipeline("Compare three ways to make agent runs durable.")  # type: ignore[operator]

    spans = exporter.get_finished_spans()
    children: dict[int | None, list] = {}
    for span in spans:
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def show(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            tokens = span.attributes.get("gen_ai.usage.output_tokens") if span.attributes else None
            print("  " * depth + span.name + (f"  ({tokens} output tokens)" if tokens else ""))
            show(span.context.span_id, depth + 1)

    print(result.status.value)
    show(None, 0)


if __name__ == "__main__":
    main()
