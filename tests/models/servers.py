"""Local servers that speak real model wire protocols, replaying recorded-shape responses.

- ``ChatCompletionsServer``: OpenAI Chat Completions, streaming as server-sent events.
- ``ConverseServer``: Amazon Bedrock Converse and ConverseStream (AWS event-stream framing), so that
  boto3's own serialization, signing, event-stream decoding and retries run against it.

Each server takes a queue of responses and records every request it gets.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: a status, headers and a body (bytes), sent in ``chunks`` pieces."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any


class _Server:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: without this, Nagle's algorithm holds the
                # body until the client's delayed ACK (40 ms a response), as real servers never do.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with server._lock:
                    server.requests.append(Request(self.path, dict(self.headers), json.loads(raw or b"{}")))
                    reply = (
                        server.replies.pop(0)
                        if server.replies
                        else Reply(500, {}, b'{"message": "no reply left"}')
                    )
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- Chat Completions -----------------------------------------------------------------------------------


def _sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


class ChatCompletionsServer(_Server):
    """``POST /v1/chat/completions`` with ``stream: true``.

    On exit, every request it got is checked with the ``openai`` package's own request types and the
    Chat Completions conversation rules (``tests.models.provider_rules``): a test fails if OpenAIModel
    sent anything the real API would refuse.
    """

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if exc[0] is not None:
            return
        from tests.models.provider_rules import openai_problems

        for request in self.requests:
            problems = openai_problems(request.body)
            assert not problems, f"OpenAI would refuse request {request.body}: {problems}"

    @staticmethod
    def text(*pieces: str, prompt_tokens: int = 10) -> Reply:
        chunks = [_chunk({"role": "assistant", "content": ""})]
        chunks += [_chunk({"content": p}) for p in pieces]
        chunks += [_chunk(finish="stop"), _usage(prompt_tokens, len(pieces))]
        return Reply(200, {"Content-Type": "text/event-stream"}, _sse(chunks))

    @staticmethod
    def tool_calls(*calls: tuple[str, str, dict[str, Any]]) -> Reply:
        """Tool calls (id, name, arguments), the arguments streamed in two pieces each, as OpenAI does."""
        chunks = [_chunk({"role": "assistant", "content": None})]
        for index, (call_id, name, arguments) in enumerate(calls):
            text = json.dumps(arguments)
            half = len(text) // 2
            chunks.append(
                _chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": text[:half]},
                            }
                        ]
                    }
                )
            )
            chunks.append(_chunk({"tool_calls": [{"index": index, "function": {"arguments": text[half:]}}]}))
        chunks += [_chunk(finish="tool_calls"), _usage(20, 5)]
        return Reply(200, {"Content-Type": "text/event-stream"}, _sse(chunks))

    @staticmethod
    def error(status: int, message: str, code: str | None = None, retry_after: str | None = None) -> Reply:
        headers = {"Content-Type": "application/json"}
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
        return Reply(status, headers, json.dumps(body).encode())


# -- Bedrock Converse -----------------------------------------------------------------------------------


def _header(name: str, value: str) -> bytes:
    encoded_name, encoded_value = name.encode(), value.encode()
    return (
        bytes([len(encoded_name)])
        + encoded_name
        + b"\x07"
        + struct.pack(">H", len(encoded_value))
        + encoded_value
    )


def event_message(event_type: str, payload: dict[str, Any]) -> bytes:
    """One AWS event-stream message (prelude, headers, JSON payload, CRC32 checksums)."""
    headers = (
        _header(":event-type", event_type)
        + _header(":content-type", "application/json")
        + _header(":message-type", "event")
    )
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF) + headers + body
    return message + struct.pack(">I", zlib.crc32(message) & 0xFFFFFFFF)


class ConverseServer(_Server):
    """``POST /model/{modelId}/converse-stream`` and ``/converse``, as Bedrock Runtime answers them."""

    @staticmethod
    def stream(*blocks: str | tuple[str, str, dict[str, Any]], stop: str | None = None) -> Reply:
        """Text blocks and (toolUseId, name, input) tool-use blocks, streamed."""
        events = [event_message("messageStart", {"role": "assistant"})]
        for index, block in enumerate(blocks):
            if isinstance(block, str):
                for piece in (block[: len(block) // 2], block[len(block) // 2 :]):
                    events.append(
                        event_message(
                            "contentBlockDelta", {"delta": {"text": piece}, "contentBlockIndex": index}
                        )
                    )
            else:
                tool_id, name, payload = block
                events.append(
                    event_message(
                        "contentBlockStart",
                        {
                            "start": {"toolUse": {"toolUseId": tool_id, "name": name}},
                            "contentBlockIndex": index,
                        },
                    )
                )
                text = json.dumps(payload)
                for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                    events.append(
                        event_message(
                            "contentBlockDelta",
                            {"delta": {"toolUse": {"input": piece}}, "contentBlockIndex": index},
                        )
                    )
            events.append(event_message("contentBlockStop", {"contentBlockIndex": index}))
        has_tools = any(not isinstance(b, str) for b in blocks)
        events.append(
            event_message("messageStop", {"stopReason": stop or ("tool_use" if has_tools else "end_turn")})
        )
        events.append(
            event_message(
                "metadata",
                {
                    "usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19},
                    "metrics": {"latencyMs": 3},
                },
            )
        )
        return Reply(200, {"Content-Type": "application/vnd.amazon.eventstream"}, b"".join(events))

    @staticmethod
    def message(text: str) -> Reply:
        body = {
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8},
            "metrics": {"latencyMs": 2},
        }
        return Reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

    @staticmethod
    def error(status: int, code: str, message: str) -> Reply:
        headers = {
            "Content-Type": "application/json",
            "x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/",
        }
        return Reply(status, headers, json.dumps({"message": message}).encode())
