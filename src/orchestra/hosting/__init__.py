"""Hosted runs, with no HTTP: the run service that ``orchestra serve`` (its routes, its dashboard, its
protocol doors) calls, and everything below it: idempotency keys, the policies for a busy session,
background runs, event logs, webhooks, liveness and takeover, the session cache.

``RunService`` takes every hosted operation (``service.py`` lists them); a refusal before anything runs
is a ``Refused`` (status, code, message), and a run's outcome is its ``RunRecord`` and, when it failed,
its ``Failure``.
"""

from orchestra.hosting.background import NotResumable, cancellable
from orchestra.hosting.config import ApiKey, HostedSpec, Limits, OnBusy, ServerConfig, load_config
from orchestra.hosting.execution import RunOutcome
from orchestra.hosting.idempotency import KeyRefused, fingerprint, validate_idempotency_key
from orchestra.hosting.invocation import Invocation, input_text
from orchestra.hosting.outcomes import Failure, Refused, failure_of
from orchestra.hosting.records import FINAL, RunRecord, RunStore, RunSummary
from orchestra.hosting.service import RunService
from orchestra.hosting.session_queue import Busy
from orchestra.hosting.sessions import ScopeView, SessionSummary, UnknownSession
from orchestra.hosting.streaming import StreamEvent
from orchestra.hosting.webhooks import WebhookRefused

__all__ = [
    "FINAL",
    "ApiKey",
    "Busy",
    "Failure",
    "HostedSpec",
    "Invocation",
    "KeyRefused",
    "Limits",
    "NotResumable",
    "OnBusy",
    "Refused",
    "RunOutcome",
    "RunRecord",
    "RunService",
    "RunStore",
    "RunSummary",
    "ScopeView",
    "ServerConfig",
    "SessionSummary",
    "StreamEvent",
    "UnknownSession",
    "WebhookRefused",
    "cancellable",
    "failure_of",
    "fingerprint",
    "input_text",
    "load_config",
    "validate_idempotency_key",
]
