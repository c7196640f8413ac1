"""Shared fixtures: a real S3 server (moto's, over HTTP on 127.0.0.1) and storage backends."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from tests.postgres import postgres_storage, postgres_uri  # noqa: F401 - a real PostgreSQL, for any test

# Fake credentials for moto; no test may reach a real AWS endpoint or read the developer's AWS config.
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)
os.environ.pop("ORCHESTRA_MODEL", None)


class OneRequestAtATime:
    """Serves a WSGI app one request at a time.

    moto checks a conditional PUT's precondition and then stores the object in two steps with no lock
    between them (moto 5.2, ``S3Response.put_object``), and its threaded server runs requests at once: two
    concurrent ``If-None-Match: *`` PUTs of one key can both succeed, where S3 lets exactly one win (a
    race that lost a turn in the two-process server test). One request at a time gives back S3's atomic
    conditional writes; moto is pure Python under the GIL, so this costs little concurrency.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        with self.lock:
            return self.app(environ, start_response)


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """The URL of a moto S3 server started for this test session (real HTTP on 127.0.0.1)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = OneRequestAtATime(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()


@pytest.fixture
def s3_bucket(moto_url: str) -> str:
    """A fresh, empty bucket on the moto server."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_url).create_bucket(Bucket=name)
    return name


def build_storage(kind: str, request: pytest.FixtureRequest, tmp_path, moto_url: str):
    """A storage backend: ``memory``, ``local``, ``s3`` or ``prefixed`` (a view over local files)."""
    from orchestra.storage import InMemoryStorage, LocalFileStorage, PrefixedStorage, S3Storage

    if kind == "memory":
        return InMemoryStorage()
    if kind == "prefixed":
        return PrefixedStorage(LocalFileStorage(tmp_path / "shared"), "tenant/acme")
    if kind == "local":
        return LocalFileStorage(tmp_path / "store")
    bucket = request.getfixturevalue("s3_bucket")
    return S3Storage(bucket, prefix="pfx", endpoint_url=moto_url)


@pytest.fixture(params=["memory", "local", "s3", "prefixed"])
def storage(request: pytest.FixtureRequest, tmp_path, moto_url: str):
    """Each storage backend in turn (and a prefixed view over local files)."""
    return build_storage(request.param, request, tmp_path, moto_url)


# -- OpenTelemetry: the SDK's in-memory exporter (tests/tracing, tests/temporal/test_tracing.py) ------------

_SPAN_EXPORTER: list = []


@pytest.fixture
def spans():
    """The spans finished during the test (an SDK provider is installed once per process: the global
    provider can be set only once)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if not _SPAN_EXPORTER:
        _SPAN_EXPORTER.append(InMemorySpanExporter())
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_SPAN_EXPORTER[0]))
        trace.set_tracer_provider(provider)
    exporter = _SPAN_EXPORTER[0]
    exporter.clear()
    yield exporter
    exporter.clear()


# -- a real full disk: a small tmpfs (tests/session/test_exactly_once.py, tests/server) ---------------------


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(size)``: a folder on a tmpfs of ``size`` ("96k"), unmounted after the test. Mounting
    needs root: without it the test is skipped, saying so (the FaultyStorage tests cover the same paths)."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the FaultyStorage tests cover the same paths")
    mounted: list[str] = []

    def mount(size: str):
        folder = tmp_path / f"small-{len(mounted)}"
        folder.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
        mounted.append(str(folder))
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", folder], check=True)
