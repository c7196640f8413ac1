"""Hosted agents and pipelines over HTTP (``orchestra serve``): the API, its config, and the dashboard."""

from orchestra.server.app import CONFIG_ENV_VAR, ApiError, InvokeRequest, create_app, create_app_from_env
from orchestra.server.auth import KeyRing, hash_key
from orchestra.server.config import ApiKey, HostedSpec, Limits, ServerConfig, load_config
from orchestra.server.runs import RunRecord, RunStore
from orchestra.server.runtime import Runtime, input_text

__all__ = [
    "CONFIG_ENV_VAR",
    "ApiError",
    "ApiKey",
    "HostedSpec",
    "InvokeRequest",
    "KeyRing",
    "Limits",
    "RunRecord",
    "RunStore",
    "Runtime",
    "ServerConfig",
    "create_app",
    "create_app_from_env",
    "hash_key",
    "input_text",
    "load_config",
]
