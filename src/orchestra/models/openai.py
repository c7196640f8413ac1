"""``OpenAIModel``: any server that speaks the OpenAI Chat Completions protocol (OpenAI, Ollama, vLLM,
llama.cpp's server, LM Studio, LiteLLM), over httpx with server-sent-event streaming."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

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

__all__ = ["OpenAIModel"]

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}
_OVERFLOW_HINTS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens")


def _text_of_result(content: list[dict[str, Any]]) -> str:
    parts = []
    for item in content:
        if "text" in item:
            parts.append(item["text"])
        elif "json" in item:
            parts.append(json.dumps(item["json"]))
        else:
            parts.append("[binary content omitted]")
    return "\n".join(parts)


def to_chat_messages(messages: Sequence[MessageDict], system_prompt: str | None) -> list[dict[str, Any]]:
    """Our messages (the Converse-shaped plain form) as Chat Completions messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for message in messages:
        role = message["role"]
        text_parts: list[dict[str, Any]] = []
        tool_calls: list[dict[str, Any]] = []
        for block in message["content"]:
            if "text" in block:
                text_parts.append({"type": "text", "text": block["text"]})
            elif "image" in block:
                image = block["image"]
                data = base64.b64encode(image["source"]["bytes"]).decode()
                text_parts.append(
                    {"type": "image_url", "image_url": {"url": f"data:image/{image['format']};base64,{data}"}}
                )
            elif "document" in block:
                document = block["document"]
                body = document["source"]["bytes"].decode("utf-8", errors="replace")
                text_parts.append({"type": "text", "text": f"Document {document['name']}:\n{body}"})
            elif "toolUse" in block:
                use = block["toolUse"]
                tool_calls.append(
                    {
                        "id": use["toolUseId"],
                        "type": "function",
                        "function": {"name": use["name"], "arguments": json.dumps(use.get("input") or {})},
                    }
                )
            elif "toolResult" in block:
                result = block["toolResult"]
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": result["toolUseId"],
                        "content": _text_of_result(result["content"]),
                    }
                )
        if role == "assistant":
            text = "".join(p["text"] for p in text_parts if p["type"] == "text")
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_calls:
                entry["tool_calls"] = tool_calls
            out.append(entry)
        elif text_parts:
            only_text = all(p["type"] == "text" for p in text_parts)
            content: Any = "\n".join(p["text"] for p in text_parts) if only_text else text_parts
            out.append({"role": "user", "content": content})
    return out


def to_chat_tools(tool_specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": s["name"],
                "description": s["description"],
                "parameters": s["inputSchema"]["json"],
            },
        }
        for s in tool_specs
    ]


class OpenAIModel:
    """A Chat Completions model.

    Args:
        model: the model name (``gpt-4o-mini``, ``llama3.2``, ...).
        base_url: the server's ``/v1`` URL; ``ollama:<model>`` strings use ``http://localhost:11434/v1``.
        api_key: the bearer token; defaults to ``OPENAI_API_KEY`` (servers that need none ignore it). At
            ``api.openai.com`` (the default ``base_url``) it is required: ``ConfigurationError`` without it.
        max_retries: attempts after a 429 or 5xx answer, waiting ``Retry-After`` or backing off.
        timeout: seconds to wait for the server.
        http_client: an ``httpx.AsyncClient`` to use (you close it). By default the model keeps one
            client (one connection pool) per event loop, because a client belongs to the loop it was
            first used on and agents may run on several (each sync call starts its own); the pool is
            closed when its loop shuts down.
        **params: request parameters passed through (``temperature``, ``max_tokens``, ...).
    """

    def __init__(
        self,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        *,
        max_retries: int = 5,
        timeout: float = 120.0,
        http_client: httpx.AsyncClient | None = None,
        **params: Any,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not self.api_key and urlsplit(self.base_url).hostname == "api.openai.com":
            # Refused now: OpenAI answers 401 without a key, and with no network the calls would be
            # retried for a minute before saying anything. A local server without a key stays allowed.
            raise ConfigurationError(
                f"openai:{model} at {self.base_url} needs an API key: set OPENAI_API_KEY (or pass "
                "api_key=); for a local server that needs none, give its base_url (or use ollama:<model>)"
            )
        self.max_retries = max_retries
        self.timeout = timeout
        self.params = params
        self.http_client = http_client
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()
        self._pools_lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    @property
    def telemetry(self) -> ModelTelemetry:
        # OpenAI-compatible servers (Ollama, vLLM) speak OpenAI's API; server.address tells them apart.
        return ModelTelemetry.from_url("openai", self.model, self.base_url)

    def _error(self, status: int, body: str) -> ModelError:
        try:
            detail = json.loads(body).get("error", {})
        except (json.JSONDecodeError, AttributeError):
            detail = body
        return self._error_of(status, detail)

    def _error_of(self, status: int | None, detail: Any) -> ModelError:
        """A provider error (the ``error`` member of a body or of a stream event) as a ``ModelError``."""
        message = detail.get("message", str(detail)) if isinstance(detail, dict) else str(detail)
        code = str(detail.get("code") or "") if isinstance(detail, dict) else ""
        lowered = f"{code} {message}".lower()
        if status in (401, 403):
            return ModelAuthenticationError(
                f"{self.name} at {self.base_url} refused the credentials ({status}: {message}); set OPENAI_API_KEY "
                "or pass api_key="
            )
        if any(hint in lowered for hint in _OVERFLOW_HINTS):
            return ContextWindowOverflowError(
                f"{self.name}: the conversation is too long for the model: {message}"
            )
        if status == 404:
            return ModelError(
                f"{self.name}: the server at {self.base_url} does not know the model ({message})"
            )
        if status is None:
            return ModelError(f"{self.name}: the server sent an error in the middle of the reply: {message}")
        if status >= 500:
            return ModelUnavailableError(f"{self.name}: the server answered {status}: {message}")
        return ModelError(f"{self.name}: the server answered {status}: {message}")

    def request_body(
        self,
        messages: Sequence[MessageDict],
        tool_specs: Sequence[ToolSpec] = (),
        system_prompt: str | None = None,
        tool_choice: str | None = None,
    ) -> dict[str, Any]:
        """The Chat Completions request body for one model turn (``tool_choice`` names a tool to force)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_chat_messages(messages, system_prompt),
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.params,
        }
        if tool_specs:
            body["tools"] = to_chat_tools(tool_specs)
            if tool_choice is not None:
                body["tool_choice"] = {"type": "function", "function": {"name": tool_choice}}
        return body

    async def stream(
        self,
        messages: Sequence[MessageDict],
        *,
        tool_specs: Sequence[ToolSpec] = (),
        system_prompt: str | None = None,
        tool_choice: str | None = None,
    ) -> AsyncIterator[ModelEvent]:
        body = self.request_body(messages, tool_specs, system_prompt, tool_choice)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = f"{self.base_url}/chat/completions"
        async with contextlib.AsyncExitStack() as stack:
            client = self.http_client or await self._pooled_client()
            if client is None:
                client = await stack.enter_async_context(httpx.AsyncClient(timeout=self.timeout))
            async for event in self._request(client, url, body, headers):
                yield event

    async def _pooled_client(self) -> httpx.AsyncClient | None:
        """This event loop's client (None outside asyncio: then each call gets its own)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        with self._pools_lock:
            pool = self._pools.get(loop)
            if pool is None:
                pool = self._pools[loop] = _Pool(httpx.AsyncClient(timeout=self.timeout))
        await pool.register()
        return pool.client

    async def _request(
        self, client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
    ) -> AsyncIterator[ModelEvent]:
        for attempt in range(self.max_retries + 1):
            try:
                async with client.stream("POST", url, json=body, headers=headers) as response:
                    if response.status_code == 200:
                        async for event in self._events(response):
                            yield event
                        return
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    retryable = response.status_code == 429 or response.status_code >= 500
                    if not retryable or attempt == self.max_retries:
                        if response.status_code == 429:
                            raise ModelThrottledError(
                                f"{self.name}: still throttled (429) after {self.max_retries} retries: {text[:200]}"
                            )
                        raise self._error(response.status_code, text)
                    delay = _retry_after(response.headers.get("retry-after"), attempt)
            except httpx.TransportError as exc:
                if attempt == self.max_retries:
                    raise ModelUnavailableError(f"{self.name}: cannot reach {self.base_url}: {exc}") from exc
                delay = _retry_after(None, attempt)
            await anyio.sleep(delay)

    async def _events(self, response: httpx.Response) -> AsyncIterator[ModelEvent]:
        calls: dict[int, dict[str, Any]] = {}
        stop: StopReason = "end_turn"
        usage: Usage | None = None
        done = False
        async for line in response.aiter_lines():
            # After [DONE], read on to the end of the body so the connection goes back to the pool.
            if done or not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                continue
            chunk = json.loads(data)
            if chunk.get("error"):
                raise self._error_of(None, chunk["error"])
            if chunk.get("usage"):
                raw = chunk["usage"]
                usage = Usage(
                    input_tokens=raw.get("prompt_tokens", 0),
                    output_tokens=raw.get("completion_tokens", 0),
                    total_tokens=raw.get("total_tokens", 0),
                )
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    yield TextDelta(delta["content"])
                for call in delta.get("tool_calls") or []:
                    entry = calls.setdefault(
                        call.get("index", len(calls)), {"id": None, "name": "", "arguments": ""}
                    )
                    entry["id"] = call.get("id") or entry["id"]
                    function = call.get("function") or {}
                    entry["name"] += function.get("name") or ""
                    entry["arguments"] += function.get("arguments") or ""
                if choice.get("finish_reason"):
                    stop = _STOP_REASONS.get(choice["finish_reason"], "end_turn")
        complete = 0
        for index in sorted(calls):
            call = calls[index]
            try:
                arguments = json.loads(call["arguments"] or "{}")
            except json.JSONDecodeError:
                if stop == "max_tokens":
                    continue  # cut off by the token limit: half a call is never run
                arguments = {"_unparsed_arguments": call["arguments"]}
            complete += 1
            yield ToolUseEvent(call["id"] or f"call_{index}", call["name"], arguments)
        if complete:
            stop = "tool_use"
        yield UsageEvent(usage or Usage())
        yield StreamStop(stop)


class _Pool:
    """One event loop's client, closed when that loop shuts down.

    ``register`` starts an async generator on the loop; the loop closes its live async generators when
    it shuts down (``asyncio.run``, ``anyio.run`` and pytest-asyncio all do), which closes the client.
    """

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self._closer: AsyncGenerator[None, None] | None = None

    async def register(self) -> None:
        if self._closer is None:
            self._closer = self._close_at_shutdown()
            await self._closer.asend(None)

    async def _close_at_shutdown(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            await self.client.aclose()


def _retry_after(header: str | None, attempt: int) -> float:
    if header:
        try:
            return min(float(header), 60.0)
        except ValueError:
            pass
    return min(0.5 * 2.0**attempt, 20.0)
