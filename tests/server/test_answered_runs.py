"""A turn answered 2xx reads back as it was answered, from every server, at once (issue 35, item 7).

A server answers a turn after its commit point and writes the turn's final run record after the answer.
The record that commits the turn says how its run ended (``Record.end``), so another server reading the
run record (still ``executing``) settles it from the session at once: it never has to wait for the first
server to write its record, or to count as gone if it died first. Two runtimes on one storage here, each
with its heartbeat; the real processes are in test_killed_servers.py."""

from __future__ import annotations

import anyio
import pytest

from orchestra.hosting import Invocation, RunService
from orchestra.server import load_config
from tests.server.conftest import write_platform_config


@pytest.fixture
async def runtimes(tmp_path, monkeypatch):
    """Two servers' runtimes on one storage, both alive (heartbeats running)."""
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "0.5")
    config = load_config(write_platform_config(tmp_path, f"file:{tmp_path}/store"))
    pair = [RunService(config), RunService(config)]
    for runtime in pair:
        await runtime.liveness.start()
    yield pair
    for runtime in pair:
        await runtime.liveness.stop()


def turn(runtime: RunService, agent: str, text: str, session: str = "s1") -> Invocation:
    hosted = next(h for h in runtime.config.agents if h.id == agent)
    return Invocation(hosted, text, session, None)


async def test_a_turn_reads_completed_from_another_server_before_its_record_is_written(runtimes):
    answering, other = runtimes
    record, failure = await answering.invoke("acme", turn(answering, "chat", "one"))
    assert failure is None
    # Answered; its final record is still queued on the server that ran it (flush_records comes after
    # the answer), so the storage holds it as executing.
    stored = await other.runs("acme").get(record.run_id)
    assert stored is not None
    assert stored.status == "executing"
    for read in (
        await other.run_record("acme", record.run_id),
        *[r for r in await other.list_runs("acme", ["chat"]) if r.run_id == record.run_id],
    ):
        assert read.status == "completed"
        assert read.output == record.output == "echo: one (turn 1)"
        assert read.stored is True
    await answering.flush_records("acme")
    final = await other.run_record("acme", record.run_id)
    assert final.status == "completed"
    assert final.settled is None  # the answering server's own record: not written over by a read


async def test_a_turn_still_running_elsewhere_reads_executing(runtimes):
    running, other = runtimes
    async with anyio.create_task_group() as group:
        group.start_soon(running.invoke, "acme", turn(running, "slow", "one"))
        # As another server would: its storage says when the run's record is there (no event crosses).
        while not await other.runs("acme").list(["slow"]):  # noqa: ASYNC110
            await anyio.sleep(0.01)
        [record] = await other.list_runs("acme", ["slow"])
        assert record.status == "executing"  # its session says it has not ended
        assert (await other.run_record("acme", record.run_id)).status == "executing"
    assert (await other.run_record("acme", record.run_id)).status == "completed"


async def test_an_interrupted_turn_reads_interrupted_with_its_question(runtimes):
    answering, other = runtimes
    record, failure = await answering.invoke("acme", turn(answering, "payer", "pay the invoice"))
    assert failure is None
    assert record.status == "interrupted"
    read = await other.run_record("acme", record.run_id)
    assert read.status == "interrupted"  # not "completed": what the turn was answered
    assert [i["id"] for i in read.interrupts] == [i["id"] for i in record.interrupts]
    assert read.interrupts[0]["tool"] == "approve_payment"
