"""Record the workflow histories that ``test_replay.py`` replays (run when the workflow's decisions change
on purpose, and say so in the change): ``python tests/temporal/record_histories.py [NAME ...]``.

It starts a Temporal dev server, runs every example pipeline (and a failed-then-resumed run) on a worker,
and writes each history to ``tests/temporal/histories/<name>.json``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
sys.path.insert(0, str(ROOT))

from orchestra import temporal  # noqa: E402
from orchestra.spec import parse_file, parse_text  # noqa: E402
from orchestra.temporal._types import WORKFLOW_NAME  # noqa: E402
from tests.cli.pipelines import FAILING  # noqa: E402
from tests.temporal.conftest import free_port  # noqa: E402

EXAMPLES = ROOT / "examples" / "graphs"
OUT = Path(__file__).parent / "histories"


async def record(
    address: str,
    name: str,
    loaded,
    storage: str,
    task,
    answer=None,
    session=None,
    keep=True,
    event=None,
    **options,
) -> None:
    target = temporal.TemporalTarget(address, "default", f"q-{name}")
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id=loaded.spec.id,
        session_id=session or name,
        storage=storage,
        task=task,
        run_id=secrets.token_hex(4),
        **options,
    )
    async with temporal.create_worker(client, target.task_queue, [loaded]):
        handle = await temporal.start_run(client, target, request)
        if answer is not None:  # a run that stops for a human: answer its question once it is asked
            from orchestra.temporal.workflow import PipelineWorkflow

            # A remote workflow's state: there is no event to wait on, only its query to ask again.
            while (progress := await handle.query(PipelineWorkflow.progress))["status"] != "interrupted":  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            await handle.signal(PipelineWorkflow.respond, {i["id"]: answer for i in progress["interrupts"]})
        if event is not None:  # a run that waits for an event: send it (twice, one key) once it waits
            from orchestra.temporal.workflow import PipelineWorkflow

            while not (await handle.query(PipelineWorkflow.progress))["interrupts"]:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            await handle.signal(PipelineWorkflow.send_event, event)
            await handle.signal(PipelineWorkflow.send_event, event)
        await handle.result()
        history = await handle.fetch_history()
    if keep:
        (OUT / f"{name}.json").write_text(history.to_json())
        print(f"recorded {name}")


async def record_tool_approval(address: str, storage: str) -> None:
    from tests.server.approval_agents import TELLER
    from tests.temporal.test_approval import answer_each_question

    loaded = parse_text(TELLER, "teller.yaml")
    target = temporal.TemporalTarget(address, "default", "q-tool_approval")
    client = await temporal.connect(target)
    request = temporal.RunRequest(
        spec_id="teller", session_id="tool_approval", storage=storage, task="pay", run_id=secrets.token_hex(4)
    )
    async with temporal.create_worker(client, target.task_queue, [loaded]):
        handle = await temporal.start_run(client, target, request)
        await answer_each_question(handle, temporal.PipelineWorkflow)
        await handle.result()
        (OUT / "tool_approval.json").write_text((await handle.fetch_history()).to_json())
    print("recorded tool_approval")


async def record_continued(address: str, storage: str) -> None:
    """A chain and a swarm that continue as new (a small threshold): the first workflow run of each, which
    ends by continuing as new, and the one after, which begins by reading the run back."""
    from temporalio.api.enums.v1 import EventType

    from tests.temporal.test_continue_as_new import chain_spec, swarm_spec

    os.environ["ORCHESTRA_TEST_HANDOFFS"] = "12"  # the swarm's agents count their handoffs down from it
    for name, text in (("continued_chain", chain_spec(30)), ("continued_swarm", swarm_spec(12))):
        loaded = parse_text(text, f"{name}.yaml")
        target = temporal.TemporalTarget(address, "default", f"q-{name}")
        client = await temporal.connect(target)
        request = temporal.RunRequest(
            spec_id=loaded.spec.id,
            session_id=name,
            storage=storage,
            task="go",
            run_id="r1",
            max_history_events=60,
        )
        async with temporal.create_worker(client, target.task_queue, [loaded]):
            handle = await temporal.start_run(client, target, request)
            await handle.result()
            first = await client.get_workflow_handle(
                handle.id, run_id=handle.first_execution_run_id
            ).fetch_history()
            last = first.events[-1]
            assert last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            attributes = last.workflow_execution_continued_as_new_event_attributes
            second = await client.get_workflow_handle(
                handle.id, run_id=attributes.new_execution_run_id
            ).fetch_history()
        (OUT / f"{name}.first.json").write_text(first.to_json())
        (OUT / f"{name}.next.json").write_text(second.to_json())
        print(f"recorded {name}")


async def main(address: str) -> None:
    import os

    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        storage = f"file:{tmp}/store"
        only = sys.argv[1:]  # names to record (default: all)
        for example in (
            "review_loop",
            "fan_out",
            "support_swarm",
            "nested",
            "invoice_triage",
            "map_summaries",
            "flaky_retries",
            "budgeted_review",
            "sticky_support",
            "versioned_v1",
            "versioned_v2",
        ):
            if only and example not in only:
                continue
            loaded = parse_file(EXAMPLES / f"{example}.yaml")
            await record(address, example, loaded, storage, loaded.spec.input)
        if not only or "approval" in only:
            loaded = parse_file(EXAMPLES / "approval.yaml")
            await record(address, "approval", loaded, storage, loaded.spec.input, answer="yes")
        if not only or "order_payment" in only:  # a wait for an event: the send_event signal
            loaded = parse_file(EXAMPLES / "order_payment.yaml")
            paid = {"name": "payment", "payload": {"amount": 42, "currency": "EUR"}, "key": "psp-charge-981"}
            await record(address, "order_payment", loaded, storage, "order 7: two lamps", event=paid)
        # A sticky swarm's next run starts where the last ended: the decision behind workflow.patched
        # ("sticky-swarms", see workflow.py). No recorded run has a node stopped by a budget, so none
        # takes the "budget-stops" patch (tests/temporal/test_scenarios.py runs budgets on Temporal).
        if not only or "sticky_support.next-run" in only:
            loaded = parse_file(EXAMPLES / "sticky_support.yaml")
            first = {"session": "sticky-next", "keep": False}
            await record(address, "sticky_support.first-run", loaded, storage, loaded.spec.input, **first)
            next_run = {"session": "sticky-next"}
            await record(address, "sticky_support.next-run", loaded, storage, "And the invoice?", **next_run)
        if not only or "tool_approval" in only:  # a tool's approvals answered by signals (issue 37)
            await record_tool_approval(address, storage)
        if not only or "continued" in only:
            await record_continued(address, storage)
        if not only or "nested_map" in only:  # a map of maps: the inner items as activities ("nested-maps")
            from tests.temporal.test_scenarios import NESTED_MAP

            os.environ["ORCHESTRA_TEST_STEP_SECONDS"] = "0.01"
            await record(address, "nested_map", parse_text(NESTED_MAP, "nested-map.yaml"), storage, "go")
        if only and "failing_first" not in only:
            return
        failing = parse_text(FAILING, "failing.yaml")
        os.environ.pop("ORCHESTRA_TEST_ALLOW", None)
        await record(address, "failing_first", failing, storage, "go")
        os.environ["ORCHESTRA_TEST_ALLOW"] = "1"
        target = temporal.TemporalTarget(address, "default", "q-failing_first")
        client = await temporal.connect(target)
        request = temporal.RunRequest(
            spec_id="failing",
            session_id="failing_first",
            storage=storage,
            task=None,
            resume=True,
            run_id="r2",
        )
        async with temporal.create_worker(client, target.task_queue, [failing]):
            handle = await client.start_workflow(
                WORKFLOW_NAME, request, id="orchestra-failing-resumed", task_queue=target.task_queue
            )
            await handle.result()
            (OUT / "failing_resumed.json").write_text((await handle.fetch_history()).to_json())
            print("recorded failing_resumed")


if __name__ == "__main__":
    port = free_port()
    server = subprocess.Popen(
        ["temporal", "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(5)
        asyncio.run(main(f"127.0.0.1:{port}"))
    finally:
        server.terminate()
        server.wait(30)
