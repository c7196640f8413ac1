"""Model strings (``openai:gpt-4o``, ``bedrock:<model id>``, ``ollama:llama3.2``, ``scripted``, ...) to models.

Real providers are created once per distinct configuration per process and shared by every agent that
names the same configuration, because their clients (connection pools, boto3 clients) are worth reusing.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from orchestra._imports import import_object
from orchestra.errors import ConfigurationError
from orchestra.messages import MessageDict, text_of
from orchestra.models._base import Model, ToolSpec
from orchestra.models.scripted import FunctionModel, ScriptedModel, ToolCall

__all__ = ["MODEL_ENV_VAR", "default_model", "resolve_model", "scripted_reply"]

MODEL_ENV_VAR = "ORCHESTRA_MODEL"
PROVIDERS = ("scripted", "echo", "function", "openai", "ollama", "bedrock")

_shared: dict[str, Model] = {}
_shared_lock = threading.Lock()


def _echo(messages: list[MessageDict], tool_specs: list[ToolSpec]) -> str:
    """Offline stand-in: answers with the newest message's text."""
    return f"echo: {text_of(messages[-1]) if messages else ''}"


def scripted_reply(reply: Any) -> Any:
    """Scripted replies as data (YAML): text, ``{tool: name, input: {...}}``, or a list of them."""
    if isinstance(reply, Mapping):
        if set(reply) - {"tool", "input", "id"} or "tool" not in reply:
            raise ConfigurationError(
                f"a scripted tool call is {{tool: name, input: {{...}}}}, not {dict(reply)!r}"
            )
        return ToolCall(str(reply["tool"]), dict(reply.get("input") or {}), reply.get("id"))
    if isinstance(reply, list):
        return [scripted_reply(r) for r in reply]
    if isinstance(reply, str | ToolCall):
        return reply
    raise ConfigurationError(f"a scripted reply is text or a tool call, not {type(reply).__name__}")


def _parse(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(spec, str):
        provider, _, rest = spec.partition(":")
        provider = provider.strip().lower()
        if provider in ("scripted", "echo"):
            return {"provider": provider}
        if provider == "function":
            return {"provider": "function", "function": rest}
        if provider in ("openai", "ollama", "bedrock"):
            if not rest:
                raise ConfigurationError(
                    f"model string {spec!r} names no model; write e.g. '{provider}:<model>'"
                )
            return {"provider": provider, "model": rest}
        raise ConfigurationError(
            f"unknown model {spec!r}: use one of {', '.join(p + ':<model>' for p in PROVIDERS[3:])}, "
            "'function:package.module:fn', 'scripted' or 'echo'"
        )
    options = dict(spec)
    provider = str(options.get("provider", "")).lower()
    if provider not in PROVIDERS:
        raise ConfigurationError(f"model provider {provider!r} is not one of {', '.join(PROVIDERS)}")
    options["provider"] = provider
    return options


def _build(options: dict[str, Any]) -> Model:
    provider = options.pop("provider")
    if provider == "scripted":
        replies: Sequence[Any] | None = options.pop("replies", None)
        latency = float(options.pop("latency", 0.0))
        if replies is None:
            return FunctionModel(_echo, latency=latency, name="scripted")
        follow = bool(options.pop("follow_history", False))
        return ScriptedModel([scripted_reply(r) for r in replies], latency=latency, follow_history=follow)
    if provider == "echo":
        return FunctionModel(_echo, name="echo")
    if provider == "function":
        fn = import_object(options.pop("function", ""))
        return FunctionModel(fn, latency=float(options.pop("latency", 0.0)))
    if provider == "openai":
        from orchestra.models.openai import OpenAIModel

        return OpenAIModel(options.pop("model"), **options)
    if provider == "ollama":
        from orchestra.models.openai import OpenAIModel

        options.setdefault("base_url", "http://localhost:11434/v1")
        return OpenAIModel(options.pop("model"), **options)
    from orchestra.models.bedrock import BedrockModel

    return BedrockModel(options.pop("model"), **options)


def resolve_model(spec: Model | str | Mapping[str, Any]) -> Model:
    """A model from an instance, a model string, or a mapping ``{"provider": ..., "model": ..., ...}``.

    Raises:
        ConfigurationError: the string or mapping does not name a known provider and model.
    """
    if not isinstance(spec, str | Mapping):
        if isinstance(spec, Model):
            return spec
        raise ConfigurationError(f"{spec!r} is not a model, a model string or a model mapping")
    options = _parse(spec)
    if options["provider"] in ("scripted", "echo", "function"):
        return _build(options)  # stateful or cheap: one per agent
    key = json.dumps(options, sort_keys=True, default=str)
    with _shared_lock:
        model = _shared.get(key)
        if model is None:
            model = _shared[key] = _build(dict(options))
    return model


def default_model() -> Model | None:
    """The model named by ``ORCHESTRA_MODEL``, or None when it is not set."""
    spec = os.environ.get(MODEL_ENV_VAR, "").strip()
    return resolve_model(spec) if spec else None
