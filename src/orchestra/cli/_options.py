"""What the commands share: their common options, loading a spec, opening a storage, running a storage
call with a one-line failure, and starting tracing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from orchestra.cli._output import EXIT_FAILED, err, fail
from orchestra.errors import OrchestraError, OrchestraSpecError
from orchestra.spec import parse_file
from orchestra.storage import DEFAULT_STORAGE_URI, storage_from_uri

__all__ = [
    "JsonOption",
    "ModelOption",
    "OnOption",
    "OtlpOption",
    "SpecFile",
    "StorageOption",
    "TemporalApiKey",
    "TemporalTls",
    "TemporalTlsCa",
    "TemporalTlsCert",
    "TemporalTlsKey",
    "load_spec",
    "open_storage",
    "session_call",
    "start_tracing",
    "storage_uri",
]

SpecFile = Annotated[Path, typer.Argument(help="The pipeline spec (YAML).", exists=True, dir_okay=False)]

StorageOption = Annotated[
    str | None,
    typer.Option(
        "--storage",
        metavar="URI",
        help="Storage URI: file:./dir, s3://bucket/prefix, sqlite:./file.db, postgresql://host/db or memory (default: the spec's, or file:./.orchestra).",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="SPEC",
        help="A model for every agent, overriding the file: openai:<m>, bedrock:<id>, ollama:<m>, scripted.",
    ),
]
OtlpOption = Annotated[
    str | None,
    typer.Option(
        "--otlp-endpoint",
        metavar="URL",
        envvar="ORCHESTRA_OTLP_ENDPOINT",
        # \[ keeps rich from reading [otel] as markup (it would print "pip install 'orchestra-agents'")
        help="Send OpenTelemetry traces to this OTLP/HTTP collector (http://host:4318); needs "
        "pip install 'orchestra-agents\\[otel]'.",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", metavar="", help="Print the result as JSON instead of a table and text.")
]
OnOption = Annotated[
    str | None,
    typer.Option(
        "--on",
        metavar="URI",
        help="Run on Temporal instead of here: temporal://HOST:PORT/NAMESPACE?task_queue=QUEUE.",
    ),
]


_TEMPORAL = "Temporal connection (with --on; also ORCHESTRA_TEMPORAL_* variables)"
TemporalTls = Annotated[
    bool,
    typer.Option(
        "--tls", envvar="ORCHESTRA_TEMPORAL_TLS", help="Connect with TLS.", rich_help_panel=_TEMPORAL
    ),
]
TemporalTlsCert = Annotated[
    Path | None,
    typer.Option(
        "--tls-cert",
        envvar="ORCHESTRA_TEMPORAL_TLS_CERT",
        help="Client certificate (mTLS), PEM.",
        rich_help_panel=_TEMPORAL,
    ),
]
TemporalTlsKey = Annotated[
    Path | None,
    typer.Option(
        "--tls-key",
        envvar="ORCHESTRA_TEMPORAL_TLS_KEY",
        help="Client private key (mTLS), PEM.",
        rich_help_panel=_TEMPORAL,
    ),
]
TemporalTlsCa = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca",
        envvar="ORCHESTRA_TEMPORAL_TLS_CA",
        help="The server's CA certificate, PEM.",
        rich_help_panel=_TEMPORAL,
    ),
]
TemporalApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="ORCHESTRA_TEMPORAL_API_KEY",
        help="API key (Temporal Cloud).",
        rich_help_panel=_TEMPORAL,
    ),
]


def start_tracing(endpoint: str | None, service: str) -> None:
    """Send this command's spans to ``endpoint`` (when given); exit 2 if the [otel] extra is missing."""
    if endpoint is None:
        return
    from orchestra.tracing import configure_otlp

    try:
        configure_otlp(endpoint, service)
    except RuntimeError as exc:
        raise fail(str(exc), 2) from None
    os.environ["ORCHESTRA_OTLP_ENDPOINT"] = endpoint  # server worker processes configure it too


def load_spec(file: Path) -> Any:
    """The parsed spec; every problem printed as file:line:column: field: message, then exit 1."""
    try:
        return parse_file(file)
    except OrchestraSpecError as exc:
        for line in exc.errors:
            err.print(line, highlight=False, markup=False)
        raise typer.Exit(EXIT_FAILED) from None


def storage_uri(loaded: Any, storage: str | None) -> str:
    """The storage a spec's runs are saved in: ``--storage``, else the spec's, else the default."""
    session = loaded.spec.session
    return storage or (session.storage if session is not None else None) or DEFAULT_STORAGE_URI


def open_storage(uri: str | None) -> Any:
    """The storage a URI names (default ``file:./.orchestra``); a bad URI is one line and exit 1."""
    try:
        return storage_from_uri(uri or DEFAULT_STORAGE_URI)
    except OrchestraError as exc:
        raise fail(str(exc)) from None


def session_call(coro_fn: Any, *args: Any) -> Any:
    """Run ``coro_fn(*args)`` to completion; an OrchestraError or ValueError is one line and exit 1."""
    try:
        return anyio.run(coro_fn, *args)
    except (OrchestraError, ValueError) as exc:
        raise fail(str(exc)) from None
