"""Tool approval on the Temporal backend (issue 37 item 3): a pipeline's agent node whose tool requires
approval waits for each answer as a signal; an edit, a rejection and "always" (for the rest of the run)
give the same results as locally, and the recorded history replays (``histories/tool_approval.json``)."""

from __future__ import annotations

import anyio
import pytest

from orchestra.spec import build, parse_text
from orchestra.tools.approval import APPROVAL
from tests.server.approval_agents import TELLER

pytestmark = pytest.mark.timeout(300)

ANSWERS = {
    "ann": {"decision": "edit", "input": {"to": "ann", "amount": 50}},
    "bob": {"decision": "reject", "reason": "bob has left"},
    "cy": "always",
}
EXPECTED = "\n".join(
    [
        "success: sent 50 to ann",
        "error: Error: a human rejected this call of 'send_money': bob has left",
        "success: sent 7 to cy",
        "success: sent 8 to dee",
    ]
)


async def answer_each_question(handle, workflow) -> list[str]:
    """Answer the run's approval questions as they come (by the payee); the payees asked about."""
    asked: list[str] = []
    for _ in range(1200):  # bounded: a run that never ends fails the test instead of hanging it
        progress = await handle.query(workflow.progress)
        if progress["status"] in ("completed", "failed"):
            return asked
        questions = progress.get("interrupts") or []
        if progress["status"] == "interrupted" and questions:
            (question,) = questions
            assert question["name"] == APPROVAL
            payee = question["reason"]["input"]["to"]
            if payee not in asked:
                asked.append(payee)
                await handle.signal(workflow.respond, {question["id"]: ANSWERS[payee]})
        await anyio.sleep(0.1)
    raise AssertionError(f"the run did not end; it asked about {asked}")


async def test_an_edit_a_rejection_and_always_on_temporal(temporal_address, tmp_path):
    from orchestra import temporal

    loaded = parse_text(TELLER, "teller.yaml")
    target = temporal.TemporalTarget(temporal_address, "default", "q-approval")
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id="teller", session_id="s1", storage=f"file:{tmp_path}/store", task="pay", run_id="r1"
    )
    async with temporal.create_worker(client, "q-approval", [loaded]):
        handle = await temporal.start_run(client, target, request)
        asked = await answer_each_question(handle, temporal.PipelineWorkflow)
        summary = await handle.result()
    assert summary["status"] == "completed", summary
    assert asked == ["ann", "bob", "cy"]  # dee was not asked: "always"
    assert await temporal.stored_output(f"file:{tmp_path}/store", "s1", "teller") == EXPECTED
    pipeline = build(parse_text(TELLER, "teller.yaml"))
    result = await pipeline.invoke_async("pay")
    while result.interrupts:
        (question,) = result.interrupts
        result = await pipeline.invoke_async([question.to_response(ANSWERS[question.reason["input"]["to"]])])
    assert result.output == EXPECTED  # the same as locally
