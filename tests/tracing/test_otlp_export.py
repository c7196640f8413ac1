"""`orchestra run --otlp-endpoint`: the real OTLP/HTTP exporter sends the run's spans to a local receiver,
which decodes them with the protocol's own protobuf types."""

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

EXAMPLES = Path(__file__).parent.parent.parent / "examples" / "graphs"


class Receiver(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.path == "/v1/traces"
        assert self.headers["Content-Type"] == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        Receiver.received.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_run_exports_its_spans_over_otlp_http(tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Receiver.received.clear()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from orchestra.cli import main; main()",
                "run",
                str(EXAMPLES / "fan_out.yaml"),
                "--storage",
                f"file:{tmp_path}/store",
                "--json",
                "--otlp-endpoint",
                f"http://127.0.0.1:{server.server_port}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    spans = [
        span
        for request in Receiver.received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    names = {span.name for span in spans}
    assert "invoke_workflow fan_out" in names or any(n.startswith("invoke_workflow") for n in names), names
    assert any(n.startswith("execute_node ") for n in names)
    assert any(n.startswith("invoke_agent ") for n in names)
    service = {
        attribute.value.string_value
        for request in Receiver.received
        for resource in request.resource_spans
        for attribute in resource.resource.attributes
        if attribute.key == "service.name"
    }
    assert service == {"orchestra-run"}
    assert len({span.trace_id for span in spans}) == 1  # one run, one trace


def test_without_the_sdk_the_option_says_how_to_install_it(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['opentelemetry.sdk'] = None\n"
        "from orchestra.cli import main\n"
        f"sys.argv = ['orchestra', 'run', {str(EXAMPLES / 'fan_out.yaml')!r}, '--otlp-endpoint', 'http://127.0.0.1:9']\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "pip install 'orchestra-agents[otel]'" in done.stderr


def test_without_a_tracer_provider_no_spans_are_made_and_one_set_later_gets_them():
    """With the API installed but no provider, orchestra skips spans (OpenTelemetry's no-op spans still
    cost a context switch each); a provider set after orchestra was imported gets the next run's spans."""
    code = """
import anyio
from opentelemetry import trace
from orchestra import Agent
from orchestra.testing import ScriptedModel
made = []
original = trace.ProxyTracer.start_as_current_span
def counting(self, *args, **kwargs):
    made.append(args[0])
    return original(self, *args, **kwargs)
trace.ProxyTracer.start_as_current_span = counting
agent = Agent(model=ScriptedModel(["one", "two"]))
anyio.run(agent.invoke_async, "hi")
print("without a provider:", len(made))
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
anyio.run(agent.invoke_async, "again")
print("with a provider:", sorted(span.name.split()[0] for span in exporter.get_finished_spans()))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "without a provider: 0" in done.stdout
    assert "with a provider: ['chat', 'invoke_agent']" in done.stdout
