"""OpenTelemetry spans, following the GenAI semantic conventions, when the ``[otel]`` extra is installed.

- ``invoke_agent {name}`` per agent invocation, ``chat {request model}`` per model call (a CLIENT span for
  a remote model, with ``gen_ai.provider.name`` and the model id as sent on the wire, see
  ``ModelTelemetry``), ``execute_tool {name}`` per tool call, with token usage attributes;
- ``invoke_workflow {id}`` per Graph or Swarm run and ``execute_node {node}`` per node execution
  (``orchestra.node.id``, ``.status``, ``.attempt``, ``orchestra.run.resumed``).

A span whose work failed has status ERROR and ``error.type``: raised exceptions, and failures reported as
values (a tool's error result, a run that ended ``failed``) through ``_Span.fail``.

Spans nest through the current OpenTelemetry context, which lives in context variables: nested
orchestrators, concurrent nodes (anyio copies the context into each task) and agents used as tools
all get the right parent. The HTTP server continues an incoming ``traceparent``; Temporal workers
propagate the context through activity headers (temporalio's ``TracingInterceptor``).

Without the extra nothing is imported, and without a tracer provider (an SDK's, or ``--otlp-endpoint``)
nothing is created: ``span()`` is then a no-op context manager that costs one check.
Message contents go into spans only with ``ORCHESTRA_TRACE_CONTENT=1``, in the conventions' structure
(``{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call", ...}, ...]}``, see
``genai_messages``).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from orchestra.models import Model, ModelTelemetry

__all__ = [
    "OTHER_ERROR",
    "SpanKind",
    "chat_attributes",
    "configure_otlp",
    "content_enabled",
    "continued",
    "enabled",
    "finish_reason",
    "genai_messages",
    "model_telemetry",
    "output_messages",
    "recording",
    "span",
    "system_instructions",
]

SpanKind = Literal["internal", "client", "server"]
OTHER_ERROR = "_OTHER"  # the conventions' error.type when no exception type names the failure

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

    def content(self, key: str, value: Any, *args: Any) -> None:
        """Record a message content attribute, only when ``ORCHESTRA_TRACE_CONTENT=1``.

        ``value`` may be a function that makes it from ``args``, so nothing is converted when contents are off.
        """
        if self._span is not None and content_enabled():
            made = value(*args) if callable(value) else value
            self._span.set_attribute(key, json.dumps(made, default=_json_default))

    def usage(self, usage: Any) -> None:
        if self._span is None:
            return
        self.set(
            gen_ai__usage__input_tokens=usage.input_tokens, gen_ai__usage__output_tokens=usage.output_tokens
        )

    def fail(self, error_type: str = OTHER_ERROR, description: str | None = None) -> None:
        """Mark the span failed (status ERROR, ``error.type``) for a failure that was not raised."""
        if self._span is None:
            return
        assert _trace is not None
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(_trace.Status(_trace.StatusCode.ERROR, description))


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


def span(
    name: str, attributes: Mapping[str, Any] | None = None, kind: SpanKind = "internal"
) -> contextlib.AbstractContextManager[_Span]:
    """A span named ``name``, current inside the block; errors mark it failed (``error.type``)."""
    # Not recording: one shared context manager that does nothing (a generator-based one per span cost
    # about 3 us, paid twice per agent invocation).
    return _recording_span(name, attributes, kind) if recording() else _NO_SPAN


class _NoSpan(contextlib.AbstractContextManager[_Span]):
    def __enter__(self) -> _Span:
        return _NOOP

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_SPAN = _NoSpan()


@contextlib.contextmanager
def _recording_span(name: str, attributes: Mapping[str, Any] | None, kind: SpanKind) -> Iterator[_Span]:
    assert _trace is not None
    with _tracer().start_as_current_span(
        name,
        kind=getattr(_trace.SpanKind, kind.upper()),
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        record_exception=True,
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
        from orchestra._dist import install_hint

        raise RuntimeError(
            "--otlp-endpoint needs the OpenTelemetry SDK and exporter: " + install_hint("otel")
        ) from None
    url = endpoint.rstrip("/")
    if not url.endswith("/v1/traces"):
        url += "/v1/traces"
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    assert _trace is not None  # the SDK imported, so the API did
    _trace.set_tracer_provider(provider)


# -- the GenAI conventions' shapes ---------------------------------------------------------------------


def model_telemetry(model: Model) -> ModelTelemetry:
    """What ``model`` is in the conventions: its own ``telemetry``, or its ``provider:model`` name read."""
    from orchestra.models import ModelTelemetry

    telemetry = getattr(model, "telemetry", None)
    if isinstance(telemetry, ModelTelemetry):
        return telemetry
    provider, _, model_id = model.name.partition(":")
    return ModelTelemetry(provider if model_id else OTHER_ERROR, model_id or model.name)


def chat_attributes(telemetry: ModelTelemetry, operation: str = "chat") -> dict[str, Any]:
    """The attributes a span about a model call (or an agent using that model) starts with."""
    return {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": telemetry.provider,
        "gen_ai.request.model": telemetry.request_model,
        "server.address": telemetry.server_address,
        "server.port": telemetry.server_port,
    }


_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_call",
    "max_tokens": "length",
    "content_filtered": "content_filter",
    "interrupt": "stop",
}


def finish_reason(stop_reason: str) -> str:
    """Our stop reason as the conventions' finish reason."""
    return _FINISH_REASONS.get(stop_reason, stop_reason)


def _parts(content: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in content:
        if "text" in block:
            parts.append({"type": "text", "content": block["text"]})
        elif "toolUse" in block:
            use = block["toolUse"]
            parts.append(
                {
                    "type": "tool_call",
                    "id": use["toolUseId"],
                    "name": use["name"],
                    "arguments": use.get("input"),
                }
            )
        elif "toolResult" in block:
            result = block["toolResult"]
            response: Any = [_result_value(item) for item in result.get("content", [])]
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": result["toolUseId"],
                    "response": response[0] if len(response) == 1 else response,
                }
            )
        elif "image" in block or "document" in block:
            kind = "image" if "image" in block else "document"
            item = block[kind]
            source = item.get("source", {})
            data = source.get("bytes")
            parts.append(
                {
                    "type": "blob",
                    "modality": "image" if kind == "image" else "document",
                    "mime_type": f"{'image' if kind == 'image' else 'application'}/{item.get('format', '')}",
                    "content": base64.b64encode(data).decode() if isinstance(data, bytes) else data,
                }
            )
        elif "reasoningContent" in block:
            text = block["reasoningContent"].get("reasoningText", {}).get("text", "")
            parts.append({"type": "reasoning", "content": text})
    return parts


def _result_value(item: Mapping[str, Any]) -> Any:
    if "text" in item:
        return item["text"]
    if "json" in item:
        return item["json"]
    return {key: _json_default(value) if isinstance(value, bytes) else value for key, value in item.items()}


def genai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the conventions' structure: a user message of tool results is a ``tool`` message."""
    converted = []
    for message in messages:
        content = message.get("content", [])
        role = message["role"]
        if role == "user" and content and all("toolResult" in block for block in content):
            role = "tool"
        converted.append({"role": role, "parts": _parts(content)})
    return converted


def output_messages(message: Mapping[str, Any], stop_reason: str) -> list[dict[str, Any]]:
    """A model's reply as the conventions' output messages (with its ``finish_reason``)."""
    return [
        {
            "role": "assistant",
            "parts": _parts(message.get("content", [])),
            "finish_reason": finish_reason(stop_reason),
        }
    ]


def system_instructions(prompt: str | None) -> list[dict[str, Any]] | None:
    """A system prompt as the conventions' ``gen_ai.system_instructions`` parts."""
    return [{"type": "text", "content": prompt}] if prompt else None


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)
