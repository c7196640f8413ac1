"""Run pipelines on Temporal (``pip install 'orchestra-agents[temporal]'``): the same Graph or Swarm, unchanged.

A run is a workflow whose scheduling decisions are orchestra's own; every node is an activity with
retries; conversations and outputs travel through orchestra's storage, by reference. See docs/temporal.md.
"""

from orchestra.temporal._types import (
    WORKFLOW_NAME,
    CommitRequest,
    NodeOutcome,
    NodeRequest,
    RunRequest,
    StateRequest,
)
from orchestra.temporal.activities import PipelineActivities, spec_hash
from orchestra.temporal.runs import RunWorkflow, WorkflowRuns
from orchestra.temporal.worker import (
    DEFAULT_GRACEFUL_SHUTDOWN,
    TemporalConnection,
    TemporalTarget,
    connect,
    create_worker,
    parse_target,
    running_handle,
    running_workflow,
    start_run,
    stored_output,
    workflow_id,
)
from orchestra.temporal.workflow import PipelineWorkflow

__all__ = [
    "DEFAULT_GRACEFUL_SHUTDOWN",
    "WORKFLOW_NAME",
    "CommitRequest",
    "NodeOutcome",
    "NodeRequest",
    "PipelineActivities",
    "PipelineWorkflow",
    "RunRequest",
    "RunWorkflow",
    "StateRequest",
    "TemporalConnection",
    "TemporalTarget",
    "WorkflowRuns",
    "connect",
    "create_worker",
    "parse_target",
    "running_handle",
    "running_workflow",
    "spec_hash",
    "start_run",
    "stored_output",
    "workflow_id",
]
