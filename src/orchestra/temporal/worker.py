"""Workers and clients: host pipelines on a task queue, start runs, follow them, answer interrupts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.worker import Worker

from orchestra.errors import ConfigurationError
from orchestra.spec import LoadedSpec
from orchestra.temporal._types import WORKFLOW_NAME, RunRequest
from orchestra.temporal.activities import PipelineActivities
from orchestra.temporal.workflow import PipelineWorkflow

__all__ = [
    "TemporalTarget",
    "connect",
    "create_worker",
    "parse_target",
    "running_handle",
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
    return TemporalTarget(
        parts.netloc, parts.path.strip("/") or "default", query.get("task_queue", "orchestra")
    )


async def connect(target: TemporalTarget) -> Client:
    return await Client.connect(target.address, namespace=target.namespace)


def workflow_id(spec_id: str, session_id: str) -> str:
    """One workflow id per pipeline and session, so a session never has two runs at once."""
    return f"orchestra-{spec_id}-{session_id}"


def create_worker(client: Client, task_queue: str, specs: Iterable[LoadedSpec], **options: Any) -> Worker:
    """A worker hosting ``specs`` (by spec id) on ``task_queue``."""
    hosted = {loaded.spec.id: loaded for loaded in specs}
    activities = PipelineActivities(hosted)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[PipelineWorkflow],
        activities=[activities.describe, activities.load_state, activities.execute_node, activities.commit],
        **options,
    )


async def start_run(client: Client, target: TemporalTarget, request: RunRequest) -> WorkflowHandle[Any, Any]:
    """Start the workflow of a run (``request.resume`` to continue a saved one)."""
    return await client.start_workflow(
        WORKFLOW_NAME,
        request,
        id=workflow_id(request.spec_id, request.session_id),
        task_queue=target.task_queue,
    )


async def running_handle(client: Client, spec_id: str, session_id: str) -> WorkflowHandle[Any, Any] | None:
    """The session's workflow if it is still running (for example waiting for interrupt responses)."""
    handle = client.get_workflow_handle(workflow_id(spec_id, session_id))
    try:
        description = await handle.describe()
    except Exception:  # no such workflow
        return None
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
