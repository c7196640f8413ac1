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
    assert "pip install 'orchestra[otel]'" in done.stderr
