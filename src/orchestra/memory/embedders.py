"""Embedders: text in, vectors out, for ``MemoryStore`` search.

- ``Embedder``: the protocol (``await embed(texts, query=False)``).
- ``BedrockEmbedder``: Amazon Bedrock's ``InvokeModel`` with a Titan (``amazon.titan-embed-text-v2:0``)
  or Cohere (``cohere.embed-english-v3``) embedding model, through boto3.
- ``OpenAIEmbedder``: any OpenAI-compatible ``POST /embeddings`` endpoint (OpenAI, vLLM, Ollama, LiteLLM).
- ``orchestra.testing.HashEmbedder``: deterministic, offline, for tests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import anyio.to_thread

from orchestra.errors import ConfigurationError, ModelAuthenticationError, ModelError, ModelThrottledError

__all__ = ["BedrockEmbedder", "Embedder", "OpenAIEmbedder"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors (lists of floats of one length)."""

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        """One vector per text, in order. ``query``: the texts are search queries, not documents (models
        such as Cohere's embed them differently; others ignore it)."""
        ...


_COHERE_BATCH = 96  # Cohere's limit of texts per request


class BedrockEmbedder:
    """Embeddings from Amazon Bedrock (``InvokeModel``).

    Args:
        model_id: a Titan text embedding model (``amazon.titan-embed-text-v2:0``, ``-v1``) or a Cohere one
            (``cohere.embed-english-v3``, ``cohere.embed-multilingual-v3``); an inference profile id with
            a region prefix (``us.cohere...``) works too.
        dimensions: Titan v2's output size (256, 512 or 1024); None for the model's default.
        client: a boto3 ``bedrock-runtime`` client; by default one from ``region_name``/``endpoint_url``.
    """

    def __init__(
        self,
        model_id: str = "amazon.titan-embed-text-v2:0",
        *,
        dimensions: int | None = None,
        client: Any = None,
        region_name: str | None = None,
        endpoint_url: str | None = None,
    ) -> None:
        family = "cohere" if "cohere." in model_id else "titan" if "titan-embed" in model_id else None
        if family is None:
            raise ConfigurationError(
                f"BedrockEmbedder: {model_id!r} is neither a Titan nor a Cohere embedding model "
                "(amazon.titan-embed-text-v2:0, cohere.embed-english-v3, ...)"
            )
        if client is None:
            import boto3

            client = boto3.client("bedrock-runtime", region_name=region_name, endpoint_url=endpoint_url)
        self.model_id = model_id
        self.family = family
        self.dimensions = dimensions
        self._client = client

    def __repr__(self) -> str:
        return f"BedrockEmbedder({self.model_id!r})"

    def _invoke(self, body: dict[str, Any]) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self._client.invoke_model(
                modelId=self.model_id,
                body=json.dumps(body),
                contentType="application/json",
                accept="application/json",
            )
            payload: dict[str, Any] = json.loads(answer["body"].read())
            return payload
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            message = f"Bedrock {self.model_id}: InvokeModel failed: {code}: {exc}"
            if code == "ThrottlingException":
                raise ModelThrottledError(message) from exc
            if code in ("AccessDeniedException", "UnrecognizedClientException"):
                raise ModelAuthenticationError(message) from exc
            raise ModelError(message) from exc
        except BotoCoreError as exc:
            raise ModelError(f"Bedrock {self.model_id}: InvokeModel failed: {exc}") from exc

    def _embed(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        out: list[list[float]] = []
        if self.family == "titan":
            for text in texts:  # Titan takes one text per request
                body: dict[str, Any] = {"inputText": text}
                if self.dimensions is not None:
                    body["dimensions"] = self.dimensions
                out.append(self._field(self._invoke(body), "embedding"))
            return out
        for start in range(0, len(texts), _COHERE_BATCH):
            chunk = list(texts[start : start + _COHERE_BATCH])
            answer = self._invoke(
                {"texts": chunk, "input_type": "search_query" if query else "search_document"}
            )
            vectors = self._field(answer, "embeddings")
            if isinstance(vectors, dict):  # asked with embedding_types: {"float": [...]}
                vectors = vectors.get("float", [])
            if len(vectors) != len(chunk):
                raise ModelError(f"Bedrock {self.model_id}: {len(vectors)} embeddings for {len(chunk)} texts")
            out.extend(vectors)
        return out

    def _field(self, answer: dict[str, Any], name: str) -> Any:
        if name not in answer:
            raise ModelError(f"Bedrock {self.model_id}: the answer has no {name!r} (keys: {sorted(answer)})")
        return answer[name]

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        if not texts:
            return []
        return await anyio.to_thread.run_sync(self._embed, list(texts), query)


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``POST {base_url}/embeddings``.

    Args:
        model: the embedding model (``text-embedding-3-small``, or the server's own name).
        base_url: the API root (``https://api.openai.com/v1``, ``http://localhost:11434/v1``, ...).
        api_key: the bearer token; by default ``OPENAI_API_KEY`` (none is sent if neither is set).
        dimensions: the output size, for models that take one (``text-embedding-3-*``).
        timeout: seconds per request.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        dimensions: int | None = None,
        timeout: float = 30.0,
        batch: int = 256,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.dimensions = dimensions
        self.timeout = timeout
        self.batch = batch

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model!r}, base_url={self.base_url!r})"

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = f"{self.base_url}/embeddings"
        out: list[list[float]] = []
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for start in range(0, len(texts), self.batch):
                chunk = list(texts[start : start + self.batch])
                body: dict[str, Any] = {"model": self.model, "input": chunk, "encoding_format": "float"}
                if self.dimensions is not None:
                    body["dimensions"] = self.dimensions
                try:
                    response = await client.post(url, json=body, headers=headers)
                except httpx.HTTPError as exc:
                    raise ModelError(
                        f"embeddings at {url} ({self.model}): {type(exc).__name__}: {exc}"
                    ) from exc
                if response.status_code != 200:
                    message = f"embeddings at {url} ({self.model}): HTTP {response.status_code}: {response.text[:300]}"
                    if response.status_code == 429:
                        raise ModelThrottledError(message)
                    if response.status_code in (401, 403):
                        raise ModelAuthenticationError(message)
                    raise ModelError(message)
                try:
                    data = sorted(response.json()["data"], key=lambda entry: entry["index"])
                    vectors = [entry["embedding"] for entry in data]
                except (ValueError, KeyError, TypeError) as exc:
                    raise ModelError(
                        f"embeddings at {url} ({self.model}): not an embeddings answer ({exc!r})"
                    ) from exc
                if len(vectors) != len(chunk):
                    raise ModelError(
                        f"embeddings at {url} ({self.model}): {len(vectors)} embeddings for {len(chunk)} texts"
                    )
                out.extend(vectors)
        return out
