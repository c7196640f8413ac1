"""The embedders against local servers that speak the providers' wire protocols: an OpenAI-compatible
``POST /embeddings``, and Bedrock's ``InvokeModel`` (its path taken from botocore's own service model, the
oracle for what boto3 sends) with Titan's and Cohere's body shapes. The servers embed with
``HashEmbedder``, so a store searched through them ranks as it does with ``HashEmbedder`` directly."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

from orchestra.errors import ModelAuthenticationError, ModelError, ModelThrottledError
from orchestra.memory import BedrockEmbedder, MemoryStore, OpenAIEmbedder
from orchestra.storage import InMemoryStorage
from orchestra.testing import HashEmbedder

DIMENSIONS = 32
REFERENCE = HashEmbedder(DIMENSIONS)


def invoke_model_path() -> re.Pattern[str]:
    """InvokeModel's request path, from botocore's service model (``/model/{modelId}/invoke``)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    uri = model.operation_model("InvokeModel").http["requestUri"]
    return re.compile("^" + re.escape(uri).replace(re.escape("{modelId}"), "(?P<model>[^/]+)") + "$")


class EmbeddingServer:
    """Answers ``/embeddings`` and ``/model/{id}/invoke``; ``fail`` makes the next answers errors."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.fail: list[tuple[int, dict[str, str], bytes]] = []
        invoke = invoke_model_path()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: no Nagle delay between them.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw)
                server.requests.append((self.path, dict(self.headers), body))
                if server.fail:
                    self.answer(server.fail[0][0], server.fail[0][2], server.fail[0][1])
                    server.fail.pop(0)
                    return
                if self.path == "/v1/embeddings":
                    data = [
                        {"object": "embedding", "index": i, "embedding": REFERENCE.vector(text)}
                        for i, text in enumerate(body["input"])
                    ]
                    data.reverse()  # the index, not the order, says which is which
                    self.answer(
                        200, json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
                    )
                    return
                match = invoke.match(self.path)
                if match is None:
                    self.answer(404, b'{"message": "no such path"}')
                    return
                from urllib.parse import unquote

                model = unquote(match["model"])
                if "titan" in model:
                    answer = {"embedding": REFERENCE.vector(body["inputText"]), "inputTextTokenCount": 3}
                else:
                    answer = {
                        "id": "x",
                        "response_type": "embeddings_floats",
                        "texts": body["texts"],
                        "embeddings": [REFERENCE.vector(text) for text in body["texts"]],
                    }
                self.answer(200, json.dumps(answer).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer()
    yield server
    server.close()


def bedrock(server: EmbeddingServer, model_id: str) -> BedrockEmbedder:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=server.url,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )
    return BedrockEmbedder(model_id, client=client)


def ranks_like_the_reference(embedder) -> None:
    texts = {"tea": "likes green tea", "car": "drives a blue car", "seat": "wants the window seat"}
    via = MemoryStore(InMemoryStorage(), embedder=embedder)
    reference = MemoryStore(InMemoryStorage(), embedder=REFERENCE)
    for key, text in texts.items():
        via.put(("u",), key, {"text": text})
        reference.put(("u",), key, {"text": text})
    for query in ["green tea", "blue car window"]:
        got = [(i.key, round(i.score or 0, 5)) for i in via.search(("u",), query=query)]
        assert got == [(i.key, round(i.score or 0, 5)) for i in reference.search(("u",), query=query)]


def test_openai_compatible_embeddings(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(
        "text-embedding-3-small", base_url=f"{server.url}/v1", api_key="sk-test", dimensions=32
    )
    vectors = anyio.run(lambda: embedder.embed(["a b", "c"]))
    assert vectors == [REFERENCE.vector("a b"), REFERENCE.vector("c")]
    path, headers, body = server.requests[-1]
    assert path == "/v1/embeddings"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body == {
        "model": "text-embedding-3-small",
        "input": ["a b", "c"],
        "encoding_format": "float",
        "dimensions": 32,
    }
    ranks_like_the_reference(embedder)


def test_openai_compatible_errors_say_what_failed(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=f"{server.url}/v1", api_key="k")
    cases = [(429, ModelThrottledError), (401, ModelAuthenticationError), (500, ModelError)]
    for status, kind in cases:
        server.fail.append((status, {}, b'{"error": {"message": "nope"}}'))
        with pytest.raises(
            kind, match=rf"embeddings at {re.escape(server.url)}/v1/embeddings \(m\): HTTP {status}"
        ):
            anyio.run(lambda: embedder.embed(["x"]))
    # A failing embedder stores nothing.
    store = MemoryStore(InMemoryStorage(), embedder=embedder)
    server.fail.append((500, {}, b"{}"))
    with pytest.raises(ModelError):
        store.put(("u",), "k", {"text": "x"})
    assert store.get(("u",), "k") is None


@pytest.mark.parametrize("model_id", ["amazon.titan-embed-text-v2:0", "cohere.embed-english-v3"])
def test_bedrock_invoke_model(server: EmbeddingServer, model_id: str) -> None:
    embedder = bedrock(server, model_id)
    vectors = anyio.run(lambda: embedder.embed(["likes tea", "blue car"]))
    assert vectors == [REFERENCE.vector("likes tea"), REFERENCE.vector("blue car")]
    path, headers, body = server.requests[-1]
    assert invoke_model_path().match(path)
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256")  # boto3 signed it
    if "titan" in model_id:
        assert len(server.requests) == 2  # Titan: one text per request
        assert body == {"inputText": "blue car"}
    else:
        assert len(server.requests) == 1
        assert body == {"texts": ["likes tea", "blue car"], "input_type": "search_document"}
        anyio.run(lambda: embedder.embed(["tea"], query=True))
        assert server.requests[-1][2]["input_type"] == "search_query"
    ranks_like_the_reference(embedder)


def test_bedrock_errors_say_what_failed(server: EmbeddingServer) -> None:
    embedder = bedrock(server, "amazon.titan-embed-text-v2:0")
    server.fail.append((429, {"x-amzn-ErrorType": "ThrottlingException"}, b'{"message": "slow down"}'))
    with pytest.raises(
        ModelThrottledError, match="amazon.titan-embed-text-v2:0: InvokeModel failed: ThrottlingException"
    ):
        anyio.run(lambda: embedder.embed(["x"]))
    server.fail.append((403, {"x-amzn-ErrorType": "AccessDeniedException"}, b'{"message": "no"}'))
    with pytest.raises(ModelAuthenticationError):
        anyio.run(lambda: embedder.embed(["x"]))
    from orchestra.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="neither a Titan nor a Cohere"):
        BedrockEmbedder("anthropic.claude-3-haiku", client=object())
