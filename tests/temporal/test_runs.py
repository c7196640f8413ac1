"""``WorkflowRuns`` and ``RunWorkflow`` on the dev server: a workflow that cannot take a signal or a query
(it ended, it has no such query) is named, and never blamed on Temporal; a failure
without a message still says what failed; and a bug is not Temporal's either."""

from __future__ import annotations

import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from orchestra.errors import (
    ConfigurationError,
    TemporalUnavailableError,
    WorkflowFailedError,
    WorkflowRequestError,
)
from orchestra.temporal import TemporalConnection, TemporalTarget, WorkflowRuns

pytestmark = pytest.mark.timeout(120)


@workflow.defn(name="fails-without-a-word")
class FailsWithoutAWord:
    """Waits for answers (a ``respond`` signal, as a run's workflow does), then fails with no message."""

    def __init__(self) -> None:
        self.answered = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.answered)
        raise ApplicationError("")

    @workflow.signal
    def respond(self, responses: dict) -> None:
        self.answered = True


async def test_answers_to_a_workflow_that_ended_name_it_and_do_not_blame_temporal(temporal_address):
    runs = WorkflowRuns(TemporalTarget(temporal_address, "default", "q-runs"))
    client = await runs.client()
    await client.start_workflow("someone-elses", id="runs/ended", task_queue="q-runs-nobody-polls")
    found = await runs.find("runs/ended")
    assert found is not None
    with pytest.raises(TypeError):  # a payload the data converter cannot encode: a bug, not Temporal's
        await found.answer({"approve": object()})
    # It ends between the look and the answers (another server deleted the session).
    assert await runs.stop("runs/ended", "session deleted elsewhere")
    with pytest.raises(WorkflowRequestError) as ended:
        await found.answer({"approve": "yes"})
    assert ended.value.workflow_id == "runs/ended"
    assert "workflow runs/ended did not take the signal respond" in str(ended.value)
    assert "NOT_FOUND" in ended.value.reason
    assert not isinstance(ended.value, TemporalUnavailableError)


async def test_a_failed_query_and_a_failure_without_a_message_say_what_failed(temporal_address):
    runs = WorkflowRuns(TemporalTarget(temporal_address, "default", "q-runs-wordless"))
    client = await runs.client()
    worker = Worker(
        client,
        task_queue="q-runs-wordless",
        workflows=[FailsWithoutAWord],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    async with worker:
        await client.start_workflow(FailsWithoutAWord.run, id="runs/wordless", task_queue="q-runs-wordless")
        found = await runs.find("runs/wordless")
        assert found is not None
        with pytest.raises(WorkflowRequestError) as failed_query:  # it has no progress query
            await found.progress()
        assert "workflow runs/wordless did not take the query progress" in str(failed_query.value)
        await found.answer({"approve": "yes"})
        with pytest.raises(WorkflowFailedError) as failed:
            await found.result()
    assert str(failed.value) == "Application error"  # the SDK names a failure that has no message


def test_a_failure_without_a_message_is_named_by_its_type():
    """The SDK fills in an empty message as it decodes a failure (above); a failure made otherwise (another
    failure converter) may have none, and still says what failed, in one line."""
    from orchestra.temporal.runs import _as_orchestra_errors

    with (
        pytest.raises(WorkflowFailedError) as failed,
        _as_orchestra_errors("127.0.0.1:7233"),
    ):
        raise WorkflowFailureError(cause=ApplicationError(""))
    assert str(failed.value) == "ApplicationError"


async def test_a_connection_misconfigured_here_is_not_blamed_on_temporal(tmp_path):
    """A certificate that cannot be read is the caller's to fix: a ConfigurationError naming the file, never
    a Temporal that cannot be reached."""
    missing = str(tmp_path / "client.pem")
    connection = TemporalConnection(tls_cert=missing, tls_key=missing)
    runs = WorkflowRuns(TemporalTarget("127.0.0.1:1", "default", "q"), connection)
    with pytest.raises(ConfigurationError, match="cannot read the TLS certificate"):
        await runs.client()
