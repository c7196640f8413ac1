"""Workers and clients: host pipelines on a task queue, start runs, follow them, answer interrupts."""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode, TLSConfig
from temporalio.worker import Worker

from orchestra import tracing
from orchestra._json import dumps
from orchestra.errors import ConfigurationError
from orchestra.spec import LoadedSpec
from orchestra.temporal._types import WORKFLOW_NAME, RunRequest
from orchestra.temporal.activities import PipelineActivities, input_key
from orchestra.temporal.workflow import PipelineWorkflow

__all__ = [
    "DEFAULT_GRACEFUL_SHUTDOWN",
    "TemporalConnection",
    "TemporalTarget",
    "connect",
    "create_worker",
    "parse_target",
    "running_handle",
    "running_workflow",
    "start_run",
    "stored_output",
    "workflow_id",
]


@dataclass(frozen=True)
class TemporalTarget:
    """Where runs go: ``temporal://HOST:PORT/NAMESPACE?task_queue=QUEUE``."""

    address: str
    namespace: str = "default"
    task_queue: str = "orchestra"


def parse_target(uri: str) -> TemporalTarget:
    """Parse ``temporal://HOST:PORT/NS?task_queue=Q``.

    Raises:
        ConfigurationError: the URI is not of that form.
    """
    parts = urlsplit(uri)
    if parts.scheme != "temporal" or not parts.netloc:
        raise ConfigurationError(
            f"{uri!r} is not a Temporal target: write temporal://HOST:PORT/NAMESPACE?task_queue=QUEUE"
        )
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if not query.get("task_queue"):
        # A default queue that no worker polls would leave the run waiting there for ever.
        raise ConfigurationError(
            f"{uri!r} names no task queue: add ?task_queue=QUEUE, the --task-queue of the workers that "
            "host this pipeline (orchestra worker --temporal HOST:PORT --task-queue QUEUE FILE)"
        )
    return TemporalTarget(parts.netloc, parts.path.strip("/") or "default", query["task_queue"])


@dataclass(frozen=True)
class TemporalConnection:
    """How to reach a real cluster: TLS (with a client certificate for mTLS) and/or an API key (Temporal
    Cloud). ``from_env`` reads ``ORCHESTRA_TEMPORAL_TLS`` (1), ``ORCHESTRA_TEMPORAL_TLS_CERT``,
    ``ORCHESTRA_TEMPORAL_TLS_KEY``, ``ORCHESTRA_TEMPORAL_TLS_CA`` (file paths) and
    ``ORCHESTRA_TEMPORAL_API_KEY``; an API key or a certificate turns TLS on."""

    tls: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    api_key: str | None = None

    @classmethod
    def from_env(cls) -> TemporalConnection:
        env = os.environ.get
        return cls(
            tls=env("ORCHESTRA_TEMPORAL_TLS", "") in ("1", "true", "yes"),
            tls_cert=env("ORCHESTRA_TEMPORAL_TLS_CERT") or None,
            tls_key=env("ORCHESTRA_TEMPORAL_TLS_KEY") or None,
            tls_ca=env("ORCHESTRA_TEMPORAL_TLS_CA") or None,
            api_key=env("ORCHESTRA_TEMPORAL_API_KEY") or None,
        )

    def client_options(self) -> dict[str, Any]:
        """The TLS and API-key arguments of ``Client.connect``.

        Raises:
            ConfigurationError: a certificate without its key (or the reverse), or a file that is missing.
        """
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigurationError(
                "mTLS needs both --tls-cert and --tls-key (the client certificate and key)"
            )

        def read(path: str | None, what: str) -> bytes | None:
            if path is None:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as exc:
                raise ConfigurationError(f"cannot read the {what} {path!r}: {exc.strerror}") from None

        options: dict[str, Any] = {}
        if self.tls or self.tls_cert or self.tls_ca or self.api_key:
            cert, key, ca = (
                read(self.tls_cert, "TLS certificate"),
                read(self.tls_key, "TLS key"),
                read(self.tls_ca, "TLS CA certificate"),
            )
            options["tls"] = TLSConfig(server_root_ca_cert=ca, client_cert=cert, client_private_key=key)
        if self.api_key:
            options["api_key"] = self.api_key
        return options


DEFAULT_GRACEFUL_SHUTDOWN = timedelta(minutes=5)
"""How long a stopping worker lets its running nodes finish (and commit) before it cancels them."""


async def connect(target: TemporalTarget, connection: TemporalConnection | None = None) -> Client:
    """A client for ``target``; ``connection`` defaults to ``TemporalConnection.from_env()``."""
    options = (connection or TemporalConnection.from_env()).client_options()
    if tracing.recording():
        # Spans cross the wire in the workflow and activity headers; workers made from this client
        # use the interceptor too, so a node's spans continue the trace of the run that started it.
        # Only with a tracer provider set (before connecting): without one, the interceptor's no-op
        # spans cost a worker a few percent of its time and trace nothing.
        from temporalio.contrib.opentelemetry import TracingInterceptor

        options["interceptors"] = [TracingInterceptor()]
    return await Client.connect(target.address, namespace=target.namespace, **options)


def workflow_id(spec_id: str, session_id: str) -> str:
    """One workflow id per pipeline and session, so a session never has two runs at once."""
    return f"orchestra-{spec_id}-{session_id}"


def create_worker(client: Client, task_queue: str, specs: Iterable[LoadedSpec], **options: Any) -> Worker:
    """A worker hosting ``specs`` (by spec id) on ``task_queue``.

    On shutdown (SIGTERM in ``orchestra worker``) it stops polling and lets running nodes finish and
    commit for up to ``graceful_shutdown_timeout`` (``DEFAULT_GRACEFUL_SHUTDOWN`` unless given), so a
    deploy does not run them again elsewhere.
    """
    hosted = {loaded.spec.id: loaded for loaded in specs}
    activities = PipelineActivities(hosted)
    options.setdefault("graceful_shutdown_timeout", DEFAULT_GRACEFUL_SHUTDOWN)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[PipelineWorkflow],
        activities=[activities.describe, activities.load_state, activities.execute_node, activities.commit],
        **options,
    )


async def start_run(
    client: Client, target: TemporalTarget, request: RunRequest, *, workflow: str | None = None
) -> WorkflowHandle[Any, Any]:
    """Start the workflow of a run (``request.resume`` to continue a saved one), with id ``workflow``
    (default ``workflow_id(spec_id, session_id)``; a server hosting one spec for several agents or
    workspaces, whose sessions live apart, names one per agent and session).

    The task and the invocation state are written to the run's storage first and the workflow gets their
    keys: a workflow's input stays in its history for good, and Temporal refuses payloads over 2 MB.
    """
    request = await by_reference(request)
    return await client.start_workflow(
        WORKFLOW_NAME,
        request,
        id=workflow or workflow_id(request.spec_id, request.session_id),
        task_queue=target.task_queue,
    )


async def by_reference(request: RunRequest) -> RunRequest:
    """``request`` with its task and invocation state moved to storage (their keys in their place)."""
    if request.task is None and not request.invocation_state:
        return request
    from orchestra.storage import storage_from_uri

    storage = storage_from_uri(request.storage)
    run_id = request.run_id or secrets.token_hex(8)
    changes: dict[str, Any] = {"run_id": run_id}
    if request.task is not None:
        changes["task_ref"] = input_key(request.session_id, request.spec_id, run_id, "task")
        await storage.write(changes["task_ref"], dumps(request.task).encode())
        changes["task"] = None
    if request.invocation_state:
        changes["invocation_state_ref"] = input_key(request.session_id, request.spec_id, run_id, "state")
        await storage.write(changes["invocation_state_ref"], dumps(request.invocation_state).encode())
        changes["invocation_state"] = {}
    return dataclasses.replace(request, **changes)


async def running_handle(client: Client, spec_id: str, session_id: str) -> WorkflowHandle[Any, Any] | None:
    """The session's workflow (``workflow_id(spec_id, session_id)``) if it is still running (for example
    waiting for interrupt responses); None if it ended, or never was.

    Changed: it no longer takes ``workflow=`` (for a workflow under another id, such as a hosted run's,
    call ``running_workflow(client, workflow)``), and a Temporal that does not answer raises ``RPCError``
    where it used to return None.

    Raises:
        RPCError: Temporal did not answer whether there is one (not reached, refused).
    """
    return await running_workflow(client, workflow_id(spec_id, session_id))


async def running_workflow(client: Client, workflow: str) -> WorkflowHandle[Any, Any] | None:
    """The workflow with id ``workflow`` (as given to ``start_run``) if it is still running.

    Raises:
        RPCError: Temporal did not answer whether there is one (not reached, refused).
    """
    handle = client.get_workflow_handle(workflow)
    try:
        description = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return handle if description.status == WorkflowExecutionStatus.RUNNING else None


async def stored_output(storage_uri: str, session_id: str, scope_id: str) -> Any:
    """The finished run's output, read from the session (the workflow only carries small summaries)."""
    from orchestra.session.admin import load_scope
    from orchestra.storage import storage_from_uri

    doc = await load_scope(storage_from_uri(storage_uri), session_id, "multiAgent", scope_id)
    order = doc.logs.get("execution_order", [])
    for node_id in reversed(order):
        result = (doc.fields.get(f"node/{node_id}") or {}).get("result") or {}
        if result.get("status") == "completed":
            return result.get("output")
    return None
