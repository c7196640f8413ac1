"""``BedrockModel``: Amazon Bedrock through boto3's Converse API (``converse_stream``, or ``converse``).

orchestra's messages are already in the Converse shape (text, toolUse, toolResult, image, document
blocks), so requests pass them through. The boto3 client is built once per provider instance and shared
by every agent using it; its blocking calls run in worker threads, and stream events cross back to the
event loop as they arrive. Throttling is retried by botocore's standard retry mode (with backoff).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread
import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from orchestra.errors import (
    ConfigurationError,
    ContextWindowOverflowError,
    ModelAuthenticationError,
    ModelError,
    ModelThrottledError,
    ModelUnavailableError,
)
from orchestra.messages import MessageDict, Usage
from orchestra.models._base import (
    ModelEvent,
    ModelTelemetry,
    StopReason,
    StreamStop,
    TextDelta,
    ToolSpec,
    ToolUseEvent,
    UsageEvent,
)

if TYPE_CHECKING:
    from mypy_boto3_bedrock_runtime import BedrockRuntimeClient

__all__ = ["BedrockModel"]

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "content_filtered": "content_filtered",
    "guardrail_intervened": "content_filtered",
}
_OVERFLOW_HINTS = (
    "input is too long",
    "too many input tokens",
    "context length",
    "too many tokens",
    "context window",
)


# Passing faults of the service (botocore's standard retry mode already retried them).
_UNAVAILABLE = frozenset(
    {
        "ServiceUnavailableException",
        "InternalServerException",
        "ModelNotReadyException",
        "ModelTimeoutException",
    }
)


class BedrockModel:
    """A model on Amazon Bedrock.

    Args:
        model_id: the Bedrock model or inference profile id (``anthropic.claude-3-5-sonnet-...``).
        region_name: the AWS region (default: the session's, e.g. ``AWS_REGION``).
        boto_session: a boto3 session (credentials, profile).
        client: a ready ``bedrock-runtime`` client; the other client options are then ignored.
        max_tokens: the most tokens to generate.
        temperature: sampling temperature.
        additional_request_fields: model-specific fields (``additionalModelRequestFields``).
        streaming: use ``converse_stream`` (default) or ``converse``.
        endpoint_url: a Bedrock-compatible endpoint (for tests and proxies).
        max_attempts: attempts per call, retries of throttling and 5xx included.
    """

    def __init__(
        self,
        model_id: str,
        region_name: str | None = None,
        boto_session: boto3.Session | None = None,
        client: BedrockRuntimeClient | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        additional_request_fields: dict[str, Any] | None = None,
        *,
        streaming: bool = True,
        endpoint_url: str | None = None,
        max_attempts: int = 6,
    ) -> None:
        self.model_id = model_id
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.additional_request_fields = additional_request_fields
        self.streaming = streaming
        if client is None:
            session = boto_session or boto3.Session()
            # botocore reads AWS_DEFAULT_REGION (and the profile) only; AWS_REGION is what the AWS SDKs
            # of other languages and Lambda set, so it is honoured too.
            region_name = region_name or session.region_name or os.environ.get("AWS_REGION") or None
            if region_name is None:
                raise ConfigurationError(
                    f"bedrock:{model_id} needs an AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or "
                    "region in the AWS profile), or pass region_name"
                )
            config = Config(
                retries={"total_max_attempts": max_attempts, "mode": "standard"}, read_timeout=300
            )
            client = session.client(
                "bedrock-runtime", region_name=region_name, endpoint_url=endpoint_url, config=config
            )
        self.client: BedrockRuntimeClient = client

    @property
    def name(self) -> str:
        return f"bedrock:{self.model_id}"

    @property
    def telemetry(self) -> ModelTelemetry:
        # The model id as botocore puts it in the request path, not our "bedrock:" model string.
        return ModelTelemetry.from_url("aws.bedrock", self.model_id, self.client.meta.endpoint_url)

    def request_body(
        self,
        messages: Sequence[MessageDict],
        tool_specs: Sequence[ToolSpec] = (),
        system_prompt: str | None = None,
        tool_choice: str | None = None,
    ) -> dict[str, Any]:
        """The Converse request for one model turn (``converse`` and ``converse_stream`` take the same).

        ``tool_choice`` names a tool the model must call (structured output forces its final tool so).
        """
        if not tool_specs and any(_holds_tool_blocks(m) for m in messages):
            # Converse refuses tool blocks without a toolConfig; an agent without tools (or a summary
            # request) still sees what the tools did, as text.
            messages = [_tool_blocks_as_text(m) if _holds_tool_blocks(m) else m for m in messages]
        request: dict[str, Any] = {"modelId": self.model_id, "messages": list(messages)}
        if system_prompt:
            request["system"] = [{"text": system_prompt}]
        if tool_specs:
            request["toolConfig"] = {"tools": [{"toolSpec": dict(spec)} for spec in tool_specs]}
            if tool_choice is not None:
                request["toolConfig"]["toolChoice"] = {"tool": {"name": tool_choice}}
        inference = {
            key: value
            for key, value in (("maxTokens", self.max_tokens), ("temperature", self.temperature))
            if value is not None
        }
        if inference:
            request["inferenceConfig"] = inference
        if self.additional_request_fields:
            request["additionalModelRequestFields"] = self.additional_request_fields
        return request

    def _error(self, exc: Exception) -> ModelError:
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return ModelAuthenticationError(
                f"{self.name}: no AWS credentials found; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "AWS_PROFILE, or pass boto_session="
            )
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            message = str(exc.response.get("Error", {}).get("Message", exc))
            lowered = message.lower()
            if code in ("ThrottlingException", "TooManyRequestsException", "ServiceQuotaExceededException"):
                return ModelThrottledError(f"{self.name}: still throttled after every retry: {message}")
            if any(hint in lowered for hint in _OVERFLOW_HINTS):
                return ContextWindowOverflowError(
                    f"{self.name}: the conversation is too long for the model: {message}"
                )
            if code in ("AccessDeniedException", "UnrecognizedClientException", "ExpiredTokenException"):
                return ModelAuthenticationError(
                    f"{self.name}: AWS refused the request ({code}: {message}); check the credentials and that "
                    "model access is enabled for this model in the Bedrock console"
                )
            if code in _UNAVAILABLE:
                return ModelUnavailableError(
                    f"{self.name}: Bedrock answered {code} after every retry: {message}"
                )
            if code == "ResourceNotFoundException" or "model identifier is invalid" in lowered:
                return ModelError(f"{self.name}: unknown model {self.model_id!r} in this region: {message}")
            return ModelError(f"{self.name}: Bedrock answered {code}: {message}")
        if isinstance(exc, BotoConnectionError | HTTPClientError):
            return ModelUnavailableError(f"{self.name}: cannot reach Bedrock after every retry: {exc}")
        return ModelError(f"{self.name}: {exc}")

    async def stream(
        self,
        messages: Sequence[MessageDict],
        *,
        tool_specs: Sequence[ToolSpec] = (),
        system_prompt: str | None = None,
        tool_choice: str | None = None,
    ) -> AsyncIterator[ModelEvent]:
        request = self.request_body(messages, tool_specs, system_prompt, tool_choice)
        if not self.streaming:
            try:
                response = await anyio.to_thread.run_sync(lambda: self.client.converse(**request))
            except (ClientError, BotoCoreError) as exc:
                raise self._error(exc) from exc
            for event in _from_message(response):
                yield event
            return
        send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=256)

        def pump() -> None:
            with send:
                try:
                    response = self.client.converse_stream(**request)
                    for event in response["stream"]:
                        anyio.from_thread.run(send.send, event)
                except (ClientError, BotoCoreError) as exc:
                    anyio.from_thread.run(send.send, exc)
                except (
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                    anyio.get_cancelled_exc_class(),
                ):
                    return  # the consumer stopped listening (cancelled, or it stopped early)

        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: anyio.to_thread.run_sync(pump, abandon_on_cancel=True))
            async with receive:
                async for event in _from_stream(receive):
                    if isinstance(event, Exception):
                        failure = event  # raised after the task group, which would wrap it in a group
                        break
                    yield event
        if failure is not None:
            raise self._error(failure) from failure


async def _from_stream(events: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Converse stream events as orchestra model events (exceptions are passed through)."""
    tool: dict[str, Any] | None = None
    tool_uses: list[ToolUseEvent] = []
    stop: StopReason = "end_turn"
    usage = Usage()
    async for event in events:
        if isinstance(event, Exception):
            yield event
            return
        if "contentBlockStart" in event:
            start = event["contentBlockStart"].get("start", {})
            if "toolUse" in start:
                tool = {"id": start["toolUse"]["toolUseId"], "name": start["toolUse"]["name"], "input": ""}
        elif "contentBlockDelta" in event:
            delta = event["contentBlockDelta"]["delta"]
            if "text" in delta:
                yield TextDelta(delta["text"])
            elif "toolUse" in delta and tool is not None:
                tool["input"] += delta["toolUse"].get("input", "")
        elif "contentBlockStop" in event:
            if tool is not None:
                tool_uses.append(ToolUseEvent(tool["id"], tool["name"], _parse_input(tool["input"])))
                tool = None
        elif "messageStop" in event:
            stop = _STOP_REASONS.get(event["messageStop"].get("stopReason", "end_turn"), "end_turn")
        elif "metadata" in event:
            raw = event["metadata"].get("usage", {})
            usage = Usage(
                input_tokens=raw.get("inputTokens", 0),
                output_tokens=raw.get("outputTokens", 0),
                total_tokens=raw.get("totalTokens", 0),
            )
    # Tool calls are held until the stop reason is known: one cut off by the token limit (an open
    # block, or input that does not parse) is dropped, never run.
    for use in tool_uses:
        if not (stop == "max_tokens" and isinstance(use.input, dict) and "_unparsed_input" in use.input):
            yield use
    yield UsageEvent(usage)
    yield StreamStop(stop)


def _holds_tool_blocks(message: MessageDict) -> bool:
    return any("toolUse" in block or "toolResult" in block for block in message["content"])


def _tool_blocks_as_text(message: MessageDict) -> MessageDict:
    content: list[dict[str, Any]] = []
    for block in message["content"]:
        if "toolUse" in block:
            use = block["toolUse"]
            content.append({"text": f"[called tool {use['name']} with {json.dumps(use.get('input'))}]"})
        elif "toolResult" in block:
            result = block["toolResult"]
            parts = [
                part["text"] if "text" in part else json.dumps(part["json"]) if "json" in part else "[binary]"
                for part in result["content"]
            ]
            content.append({"text": f"[tool result ({result['status']}): {' '.join(parts) or '-'}]"})
        else:
            content.append(block)
    return {**message, "content": content}


def _parse_input(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {"_unparsed_input": text}


def _from_message(response: Any) -> Iterator[ModelEvent]:
    """A ``converse`` (non-streaming) answer as orchestra model events."""
    content = response.get("output", {}).get("message", {}).get("content", [])
    for block in content:
        if "text" in block:
            yield TextDelta(block["text"])
        elif "toolUse" in block:
            use = block["toolUse"]
            yield ToolUseEvent(use["toolUseId"], use["name"], use.get("input") or {})
    raw = response.get("usage", {})
    yield UsageEvent(
        Usage(
            input_tokens=raw.get("inputTokens", 0),
            output_tokens=raw.get("outputTokens", 0),
            total_tokens=raw.get("totalTokens", 0),
        )
    )
    yield StreamStop(_STOP_REASONS.get(response.get("stopReason", "end_turn"), "end_turn"))
