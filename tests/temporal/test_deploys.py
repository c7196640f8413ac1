"""Reaching a real cluster (TLS, mTLS, API keys) and deploys: a worker stopped with SIGTERM finishes its
running node, which then never runs again elsewhere."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.errors import ConfigurationError
from tests.temporal.conftest import workers

pytestmark = pytest.mark.timeout(300)


def temporal():
    from orchestra import temporal as module

    return module


def test_tls_and_api_keys_reach_client_connect(tmp_path, monkeypatch, spans):
    from temporalio.client import Client

    t = temporal()
    (tmp_path / "cert.pem").write_bytes(b"CERT")
    (tmp_path / "key.pem").write_bytes(b"KEY")
    (tmp_path / "ca.pem").write_bytes(b"CA")
    seen = []

    async def fake_connect(address, **options):
        seen.append((address, options))
        return "client"

    monkeypatch.setattr(Client, "connect", fake_connect)
    target = t.TemporalTarget("ns.acct.tmprl.cloud:7233", "ns.acct", "q")
    mtls = t.TemporalConnection(
        tls_cert=str(tmp_path / "cert.pem"),
        tls_key=str(tmp_path / "key.pem"),
        tls_ca=str(tmp_path / "ca.pem"),
    )
    anyio.run(t.connect, target, mtls)
    address, options = seen[-1]
    assert address == "ns.acct.tmprl.cloud:7233"
    assert options["namespace"] == "ns.acct"
    tls = options["tls"]
    assert (tls.client_cert, tls.client_private_key, tls.server_root_ca_cert) == (b"CERT", b"KEY", b"CA")

    monkeypatch.setenv("ORCHESTRA_TEMPORAL_API_KEY", "cloud-key")  # run --on reads the environment
    anyio.run(t.connect, target)
    options = seen[-1][1]
    assert options["api_key"] == "cloud-key"
    assert options["tls"].client_cert is None  # an API key implies TLS
    monkeypatch.delenv("ORCHESTRA_TEMPORAL_API_KEY")
    anyio.run(t.connect, target)
    plain = seen[-1][1]
    assert set(plain) - {"interceptors"} == {"namespace"}  # the dev server: plain, no key
    # With a tracer provider set (the spans fixture sets one), the trace context rides in the workflow and
    # activity headers.
    assert [type(i).__name__ for i in plain.get("interceptors", [])] == ["TracingInterceptor"]


_CONNECT_WITHOUT_A_PROVIDER = """
import anyio
from temporalio.client import Client
from orchestra import temporal

async def fake_connect(address, **options):
    print(sorted(options))

Client.connect = fake_connect
anyio.run(temporal.connect, temporal.TemporalTarget("localhost:7233", "default", "q"))
"""


def test_without_a_tracer_provider_no_tracing_interceptor_is_added():
    """In a fresh process (the global provider can be set only once, and other tests set it): with the
    OpenTelemetry API installed but no provider, the interceptor would only make no-op spans."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _CONNECT_WITHOUT_A_PROVIDER], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['namespace']"


def test_a_half_configured_mtls_is_a_one_line_error(tmp_path):
    t = temporal()
    with pytest.raises(ConfigurationError, match="mTLS needs both --tls-cert and --tls-key"):
        t.TemporalConnection(tls_cert=str(tmp_path / "cert.pem")).client_options()
    with pytest.raises(ConfigurationError, match="cannot read the TLS CA certificate"):
        t.TemporalConnection(tls_ca=str(tmp_path / "missing.pem")).client_options()
    spec = tmp_path / "p.yaml"
    spec.write_text(
        "version: 1\nkind: graph\nid: p\nnodes:\n  - {id: a, function: 'tests.support:spec_source'}\n"
    )
    result = CliRunner().invoke(
        app,
        ["worker", "--temporal", "127.0.0.1:1", "--task-queue", "q", "--tls-cert", str(spec), str(spec)],
    )
    assert result.exit_code == 1
    assert "mTLS needs both --tls-cert and --tls-key" in result.stderr
    assert "Traceback" not in result.output


def test_a_worker_stopped_for_a_deploy_finishes_its_node_first(temporal_address, tmp_path, monkeypatch):
    t = temporal()
    spec = tmp_path / "deploy.yaml"
    spec.write_text(
        "version: 1\nkind: graph\nid: deploy\nnodes:\n"
        "  - {id: long, function: 'tests.support:slow_step'}\n"
        "  - {id: after, function: 'tests.support:slow_step'}\n"
        "edges:\n  - {from: long, to: after}\n"
    )
    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "3")

    async def start():
        target = t.TemporalTarget(temporal_address, "default", "q-deploy")
        client = await t.connect(target)
        request = t.RunRequest(
            spec_id="deploy",
            session_id="d1",
            storage=f"file:{tmp_path}/store",
            task="go",
            heartbeat_seconds=2,
        )
        return await t.start_run(client, target, request)

    with workers(temporal_address, "q-deploy", spec) as pool:
        (old,) = pool.running
        handle = anyio.run(start)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (calls.exists() and "long" in calls.read_text()):
            time.sleep(0.05)
        old.send_signal(signal.SIGTERM)  # the deploy: the node is 3 s long and has just started
        pool.start()
        assert old.wait(60) == 0  # it waited for its node, then exited cleanly
        summary = anyio.run(handle.result)
    assert summary["status"] == "completed", summary
    assert Counter(calls.read_text().split()) == {"long": 1, "after": 1}  # nothing ran twice


def test_temporal_failures_in_the_cli_are_one_line_with_what_to_do(temporal_address, tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(
        "version: 1\nkind: graph\nid: p\nnodes:\n  - {id: a, function: 'tests.support:spec_source'}\n"
    )
    common = ["run", str(spec), "--storage", f"file:{tmp_path}/store", "--session-id", "s", "--input", "go"]
    unreachable = CliRunner().invoke(app, [*common, "--on", "temporal://127.0.0.1:1/default?task_queue=q"])
    assert unreachable.exit_code == 1
    assert "cannot reach Temporal at 127.0.0.1:1" in unreachable.stderr
    refused = CliRunner().invoke(
        app, [*common, "--on", f"temporal://{temporal_address}/no-such-ns?task_queue=q"]
    )
    assert refused.exit_code == 1
    assert f"Temporal at {temporal_address} refused the request" in refused.stderr
    assert "NOT_FOUND" in refused.stderr
    for result in (unreachable, refused):
        assert "Traceback" not in result.output
        assert len(result.stderr.strip().splitlines()) == 1


async def test_a_worker_with_another_version_of_the_pipeline_refuses_the_run(temporal_address, tmp_path):
    from orchestra.spec import parse_text
    from tests.temporal.test_temporal import run_on

    v1 = (
        "version: 1\nkind: graph\nid: versioned\nnodes:\n  - {id: a, function: 'tests.support:spec_source'}\n"
    )
    v2 = v1.replace("spec_source", "spec_mark")  # same id, other code: what a half-done deploy looks like
    old, new = parse_text(v1, "v1.yaml"), parse_text(v2, "v2.yaml")
    assert temporal().spec_hash(old) != temporal().spec_hash(new)
    summary, _ = await run_on(
        temporal_address,
        "q-version",
        new,
        f"file:{tmp_path}/store",
        "s1",
        "go",
        spec_hash=temporal().spec_hash(old),
    )
    assert summary["status"] == "failed"
    assert "this worker hosts another version of pipeline 'versioned'" in summary["reason"]
    same, _ = await run_on(
        temporal_address,
        "q-version",
        new,
        f"file:{tmp_path}/store",
        "s2",
        "go",
        spec_hash=temporal().spec_hash(new),
    )
    assert same["status"] == "completed"


async def test_the_result_of_a_detached_temporal_run_can_be_fetched_once_it_finished(
    temporal_address, tmp_path
):
    from pathlib import Path

    from orchestra.spec import parse_file
    from tests.temporal.test_temporal import run_on

    example = Path(__file__).parent.parent.parent / "examples" / "graphs" / "fan_out.yaml"
    loaded = parse_file(example)
    storage = f"file:{tmp_path}/store"
    summary, _ = await run_on(temporal_address, "q-result", loaded, storage, "detached", loaded.spec.input)
    assert summary["status"] == "completed"
    arguments = ["result", str(example), "--session-id", "detached", "--storage", storage]
    shown = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(app, arguments)
    )  # the CLI runs its own loop
    assert shown.exit_code == 0, shown.output
    expected = await temporal().stored_output(storage, "detached", loaded.spec.id)
    assert shown.stdout.strip() == expected


def test_storage_that_cannot_work_fails_the_run_at_once_with_its_message(
    temporal_address, tmp_path, moto_url
):
    example = Path(__file__).parent.parent.parent / "examples" / "graphs" / "fan_out.yaml"
    on = f"temporal://{temporal_address}/default?task_queue=q-no-bucket"
    storage = f"s3://no-such-bucket/runs?endpoint_url={moto_url}"
    with workers(temporal_address, "q-no-bucket", example):
        started = time.monotonic()
        # A new run stores its task before it starts: that write fails, and nothing starts.
        run = CliRunner().invoke(
            app, ["run", str(example), "--on", on, "--storage", storage, "--session-id", "s1"]
        )
        # A resume starts at once, and the worker's first read of the session fails it, not retried.
        resume = CliRunner().invoke(
            app, ["resume", str(example), "--on", on, "--storage", storage, "--session-id", "s1"]
        )
        assert time.monotonic() - started < 60  # not hours of retries
    assert run.exit_code == 1
    assert run.stderr.count("\n") == 1
    assert "The specified bucket does not exist" in run.stderr
    assert resume.exit_code == 1
    assert "the run failed on Temporal" in resume.stderr
    assert "NoSuchBucket" in resume.stderr
    assert "retrying will not help" in resume.stderr


def test_a_task_over_temporals_payload_warning_size_keeps_json_output_clean(temporal_address, tmp_path):
    """A 700 KB task goes to storage, not into the workflow's input: temporalio has no payload to warn
    about on stdout (it did above 512 KB), and ``--json`` stays one parseable document."""
    example = Path(__file__).parent.parent.parent / "examples" / "graphs" / "fan_out.yaml"
    with workers(temporal_address, "q-big-json", example):
        result = CliRunner().invoke(
            app,
            [
                "run",
                str(example),
                "--on",
                f"temporal://{temporal_address}/default?task_queue=q-big-json",
                "--storage",
                f"file:{tmp_path}/store",
                "--session-id",
                "s1",
                "--input",
                "-",
                "--json",
            ],
            input="x" * 700_000,
        )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "completed"
