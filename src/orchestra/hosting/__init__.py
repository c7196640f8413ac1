"""Hosted runs, with no HTTP: the run service that ``orchestra serve`` (and its protocol doors) call, and
everything below it: idempotency keys, policies for a busy session, background runs, event logs,
webhooks, liveness and takeover, the session cache."""

from orchestra.hosting.config import ApiKey, HostedSpec, Limits, ServerConfig, load_config
from orchestra.hosting.invocation import Invocation, input_text
from orchestra.hosting.runs import RunRecord, RunStore, RunSummary
from orchestra.hosting.runtime import Runtime

__all__ = [
    "ApiKey",
    "HostedSpec",
    "Invocation",
    "Limits",
    "RunRecord",
    "RunStore",
    "RunSummary",
    "Runtime",
    "ServerConfig",
    "input_text",
    "load_config",
]
