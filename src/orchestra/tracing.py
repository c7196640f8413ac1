"""OpenTelemetry spans, following the GenAI semantic conventions, when the ``[otel]`` extra is installed.

- ``invoke_agent {name}`` per agent invocation, ``chat {model}`` per model call, ``execute_tool {name}``
  per tool call, with token usage attributes (``gen_ai.usage.input_tokens``/``output_tokens``);
- ``invoke_workflow {id}`` per Graph or Swarm run and ``execute_node {node}`` per node execution
  (``orchestra.node.id``, ``.status``, ``.attempt``, ``orchestra.run.resumed``).

Spans nest through the current OpenTelemetry context, which lives in context variables: nested
orchestrators, concurrent nodes (anyio copies the context into each task) and agents used as tools
all get the right parent. The HTTP server continues an incoming ``traceparent``; Temporal workers
propagate the context through activity headers (temporalio's ``TracingInterceptor``).

Without the extra nothing is imported, and without a tracer provider (an SDK's, or ``--otlp-endpoint``)
nothing is created: ``span()`` is then a no-op context manager that costs one check.
Message contents go into spans only with ``ORCHESTRA_TRACE_CONTENT=1``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["configure_otlp", "content_enabled", "continued", "enabled", "recording", "span"]

try:  # the [otel] extra
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised by the "extra absent" test in a subprocess
    _trace = None  # type: ignore[assignment]

_TRACER_NAME = "orchestra"
CONTENT_ENV_VAR = "ORCHESTRA_TRACE_CONTENT"


def enabled() -> bool:
    """Whether the OpenTelemetry API is installed (spans go to whatever provider is configured)."""
    return _trace is not None


def content_enabled() -> bool:
    """Whether message contents may be recorded (``ORCHESTRA_TRACE_CONTENT=1``)."""
    return os.environ.get(CONTENT_ENV_VAR) == "1"


class _Span:
    """The handle ``span()`` yields: set attributes now or at the end (a no-op without the extra)."""

    __slots__ = ("_span",)

    def __init__(self, otel_span: Any = None) -> None:
        self._span = otel_span

    def set(self, **attributes: Any) -> None:
        if self._span is not None:
            for key, value in attributes.items():
                if value is not None:
                    self._span.set_attribute(key.replace("__", "."), value)

    def content(self, key: str, value: Any) -> None:
        """Record a message content attribute, only when ``ORCHESTRA_TRACE_CONTENT=1``."""
        if self._span is not None and content_enabled():
            self._span.set_attribute(key, json.dumps(value, default=str))

    def usage(self, usage: Any) -> None:
        if self._span is None:
            return
        self.set(
            gen_ai__usage__input_tokens=usage.input_tokens, gen_ai__usage__output_tokens=usage.output_tokens
        )


_NOOP = _Span()


@functools.cache
def _tracer() -> Any:
    # Looked up once: before a provider is set this is OpenTelemetry's proxy tracer, which follows the
    # global provider when one is set later, so caching it is safe and saves a lookup per span.
    assert _trace is not None
    return _trace.get_tracer(_TRACER_NAME)


def recording() -> bool:
    """Whether spans go anywhere: the API is installed and a tracer provider was set (an SDK's). Without
    one every span would be OpenTelemetry's no-op span, which still costs a context switch per span."""
    if _trace is None:
        return False
    # The API keeps the provider set by set_tracer_provider() in this module global; reading it skips
    # get_tracer_provider()'s environment lookup, which cost more than the rest of the check per span.
    provider = getattr(_trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is None and not _PROVIDER_FROM_ENV:
        return False
    return not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)


_UNKNOWN = object()
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def span(name: str, attributes: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[_Span]:
    """A span named ``name``, current inside the block; errors mark it failed (``error.type``)."""
    # Not recording: one shared context manager that does nothing (a generator-based one per span cost
    # about 3 us, paid twice per agent invocation).
    return _recording_span(name, attributes) if recording() else _NO_SPAN


class _NoSpan(contextlib.AbstractContextManager[_Span]):
    def __enter__(self) -> _Span:
        return _NOOP

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_SPAN = _NoSpan()


@contextlib.contextmanager
def _recording_span(name: str, attributes: Mapping[str, Any] | None) -> Iterator[_Span]:
    assert _trace is not None
    with _tracer().start_as_current_span(
        name, attributes=dict(attributes or {}), record_exception=True
    ) as current:
        handle = _Span(current)
        try:
            yield handle
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__name__)
            raise


@contextlib.contextmanager
def continued(headers: Mapping[str, str]) -> Iterator[None]:
    """Inside the block, spans continue the trace named by ``headers`` (W3C ``traceparent``), if any."""
    if _trace is None:
        yield
        return
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract(headers))
    try:
        yield
    finally:
        context.detach(token)


def configure_otlp(endpoint: str, service_name: str = "orchestra") -> None:
    """Send spans to an OTLP/HTTP collector at ``endpoint`` (``http://host:4318``; ``/v1/traces`` is added).

    Raises:
        RuntimeError: the ``[otel]`` extra (SDK and exporter) is not installed; the message says how to.
    """
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise RuntimeError(
            "--otlp-endpoint needs the OpenTelemetry SDK and exporter: pip install 'orchestra[otel]'"
        ) from None
    url = endpoint.rstrip("/")
    if not url.endswith("/v1/traces"):
        url += "/v1/traces"
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    assert _trace is not None  # the SDK imported, so the API did
    _trace.set_tracer_provider(provider)
