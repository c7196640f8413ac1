"""Shared fixtures: a real S3 server (moto's, over HTTP on 127.0.0.1) and storage backends."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import boto3
import pytest

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


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """The URL of a moto S3 server started for this test session (real HTTP on 127.0.0.1)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


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
