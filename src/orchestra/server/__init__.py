"""Hosted agents and pipelines over HTTP (``orchestra serve``): the API, its config, and the dashboard."""

from orchestra.hosting.config import ApiKey, HostedSpec, Limits, ServerConfig, load_config
from orchestra.hosting.runs import RunRecord, RunStore
from orchestra.hosting.runtime import Runtime, input_text
from orchestra.server.app import CONFIG_ENV_VAR, ApiError, InvokeRequest, create_app, create_app_from_env
from orchestra.server.auth import KeyRing, hash_key

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
