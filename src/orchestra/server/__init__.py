"""Hosted agents and pipelines over HTTP (``orchestra serve``): the API, the dashboard and the protocol
doors, each a translation of ``orchestra.hosting``'s run service."""

from orchestra.hosting.config import ApiKey, HostedSpec, Limits, ServerConfig, load_config
from orchestra.hosting.records import RunRecord
from orchestra.server.app import (
    CONFIG_ENV_VAR,
    TEMPORAL_ENV_VAR,
    ApiError,
    InvokeRequest,
    create_app,
    create_app_from_env,
)
from orchestra.server.auth import KeyRing, hash_key

__all__ = [
    "CONFIG_ENV_VAR",
    "TEMPORAL_ENV_VAR",
    "ApiError",
    "ApiKey",
    "HostedSpec",
    "InvokeRequest",
    "KeyRing",
    "Limits",
    "RunRecord",
    "ServerConfig",
    "create_app",
    "create_app_from_env",
    "hash_key",
    "load_config",
]
