"""Traces cross Temporal: the activity's node spans continue the trace of the client that started the run
(context carried in the activity headers by temporalio's TracingInterceptor)."""

import secrets
from pathlib import Path

import pytest
from opentelemetry import trace

from orchestra.spec import parse_file

EXAMPLES = Path(__file__).parent.parent.parent / "examples" / "graphs"
pytestmark = pytest.mark.timeout(300)


async def test_node_spans_continue_the_callers_trace_through_activities(spans, temporal_address, tmp_path):
    from orchestra import temporal

    loaded = parse_file(EXAMPLES / "fan_out.yaml")
    target = temporal.TemporalTarget(temporal_address, "default", "q-traced")
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id=loaded.spec.id,
        session_id="traced",
        storage=f"file:{tmp_path}/store",
        task=loaded.spec.input,
        run_id=secrets.token_hex(4),
    )
    with trace.get_tracer("test").start_as_current_span("caller") as caller:
        async with temporal.create_worker(client, "q-traced", [loaded]):
            handle = await temporal.start_run(client, target, request)
            summary = await handle.result()
    assert summary["status"] == "completed"
    finished = spans.get_finished_spans()
    trace_id = caller.get_span_context().trace_id
    nodes = [s for s in finished if s.name.startswith("execute_node ")]
    assert {s.name for s in nodes} >= {f"execute_node {n}" for n in summary["execution_order"]}
    assert all(s.context.trace_id == trace_id for s in nodes)  # one trace, from the caller down
    activity_spans = {s.context.span_id: s for s in finished if s.name.startswith("RunActivity:")}
    assert activity_spans, [s.name for s in finished]
    assert all(s.parent.span_id in activity_spans for s in nodes)
    agents = [s for s in finished if s.name.startswith("invoke_agent ")]
    node_ids = {s.context.span_id for s in nodes}
    assert agents
    assert all(a.parent.span_id in node_ids for a in agents)
