"""Durable waits (``orchestra.waits``, ``orchestra.inbox``): a function node or tool sleeps or waits for an
event; the run is saved waiting; a new process over the same storage wakes it; an event is taken once."""

from __future__ import annotations

import anyio
import pytest

import orchestra
from orchestra import Agent, tool
from orchestra.errors import ConfigurationError, OrchestraSpecError
from orchestra.inbox import EventInbox, EventKeyReused, answers_for, session_inbox
from orchestra.multiagent import Graph, Status
from orchestra.session import SnapshotSessionManager
from orchestra.spec import parse_text
from orchestra.storage import InMemoryStorage
from orchestra.testing import ScriptedModel, ToolCall
from orchestra.waits import CLOCK_ENV, Wait, answers_due, now, open_waits, parse_duration
from tests.server.wait_steps import calls

HOUR = 3600.0


@pytest.fixture
def counted(tmp_path, monkeypatch):
    path = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(path))
    return path


def graph(storage, nodes, edges=(), session="s1"):
    return Graph(nodes, edges=list(edges), session_manager=SnapshotSessionManager(session, storage=storage))


def answer(answers):
    return [{"interruptResponse": {"interruptId": i, "response": a}} for i, a in answers.items()]


async def test_a_sleeping_node_is_saved_waiting_and_a_new_process_wakes_it_once_due(counted):
    from tests.server.wait_steps import _note

    async def nap(node_input):
        _note("nap")
        await orchestra.sleep(HOUR)
        _note("woke")
        return "rested"

    storage = InMemoryStorage()

    def nodes():
        return {"first": lambda i: "a", "nap": nap, "last": lambda i: f"after {i.inputs['nap']}"}

    asleep = await graph(storage, nodes(), [("first", "nap"), ("nap", "last")]).invoke_async("go")
    assert asleep.status == Status.INTERRUPTED
    [wait] = open_waits(asleep.interrupts)
    assert wait.kind == "timer"
    assert wait.until is not None
    assert wait.until > now() + HOUR - 60

    woken = graph(storage, nodes(), [("first", "nap"), ("nap", "last")])  # a new process
    assert answers_due([wait], wait.until - 1) == {}  # not yet
    result = await woken.invoke_async(answer(answers_due([wait], wait.until)))
    assert result.status == Status.COMPLETED
    assert result.results["last"].output == "after rested"
    assert calls(counted) == ["nap", "nap", "woke"]  # the node ran again from its start, once


async def test_a_sleep_run_again_without_its_answer_keeps_its_time():
    async def nap(node_input):
        await orchestra.sleep(HOUR)
        return "rested"

    storage = InMemoryStorage()
    first = await graph(storage, {"nap": nap}).invoke_async("go")
    await anyio.sleep(0.01)
    again = await graph(storage, {"nap": nap}).invoke_async("go")  # as a takeover does: the same task
    assert [i.reason for i in again.interrupts] == [i.reason for i in first.interrupts]


async def test_a_node_that_sleeps_twice_resumes_past_its_first_sleep(counted):
    from tests.server.wait_steps import sleepy_twice

    storage = InMemoryStorage()
    result = await graph(storage, {"rest": sleepy_twice}).invoke_async("go")
    for _ in range(2):
        waits = open_waits(result.interrupts)
        assert len(waits) == 1
        result = await graph(storage, {"rest": sleepy_twice}).invoke_async(
            answer(answers_due(waits, now() + 61))
        )
    assert result.status == Status.COMPLETED, result.interrupts
    assert calls(counted) == ["start", "start", "between", "start", "between", "end"]


async def test_a_run_stopped_after_its_wait_was_answered_does_not_wait_again(counted):
    from tests.server.wait_steps import _note

    passed = anyio.Event()

    async def nap_then_work(node_input):
        await orchestra.sleep(HOUR)
        _note("past the wait")
        if not passed.is_set():
            passed.set()
            await anyio.sleep_forever()  # stopped here (Ctrl-C, SIGTERM): saved with its answer kept
        return "worked"

    storage = InMemoryStorage()
    first = await graph(storage, {"job": nap_then_work}).invoke_async("go")
    waits = open_waits(first.interrupts)
    async with anyio.create_task_group() as group:
        group.start_soon(
            graph(storage, {"job": nap_then_work}).invoke_async, answer(answers_due(waits, now() + HOUR + 1))
        )
        await passed.wait()
        group.cancel_scope.cancel()
    resumed = await graph(storage, {"job": nap_then_work}).invoke_async()  # orchestra resume
    assert resumed.status == Status.COMPLETED, resumed.interrupts
    assert resumed.results["job"].output == "worked"
    assert calls(counted) == ["past the wait", "past the wait"]


async def test_an_event_sent_before_the_wait_is_kept_and_each_event_is_taken_once():
    storage = InMemoryStorage()
    inbox = session_inbox(storage, "s1")
    assert await inbox.send("payment", {"amount": 42}, "pay-1") is True
    assert await inbox.send("payment", {"amount": 42}, "pay-1") is False  # a duplicate: nothing kept
    with pytest.raises(EventKeyReused, match="pay-1"):
        await inbox.send("payment", {"amount": 1}, "pay-1")

    async def charge(node_input):
        got = await orchestra.wait_for_event("payment", timeout=HOUR)
        return {"paid": got.payload, "timed_out": got.timed_out}

    asleep = await graph(storage, {"charge": charge}).invoke_async("order 7")
    waits = open_waits(asleep.interrupts)
    assert [(w.kind, w.event) for w in waits] == [("event", "payment")]
    answers = await answers_for(waits, inbox)
    assert answers == await answers_for(waits, inbox)  # decided once: the same answer every time
    result = await graph(storage, {"charge": charge}).invoke_async(answer(answers))
    assert result.results["charge"].output == {"paid": {"amount": 42}, "timed_out": False}

    # Another wait for the same name does not get the event the first took; at its deadline it times out.
    other = Wait("int-other", "event", event="payment", deadline=now() + 10)
    assert await inbox.answer(other) is None
    assert (await inbox.answer(other, at=now() + 11))["timed_out"] is True
    assert await inbox.pending() == []


async def test_two_waits_racing_for_one_event_take_it_once():
    inbox = EventInbox(InMemoryStorage(), "inbox/s.json")
    await inbox.send("payment", "one", "k1")
    waits = [Wait(f"int-{n}", "event", event="payment") for n in range(8)]
    got: dict[str, object] = {}

    async def take(wait):
        got[wait.interrupt_id] = await inbox.answer(wait)

    async with anyio.create_task_group() as group:
        for wait in waits:
            group.start_soon(take, wait)
    assert sum(a is not None for a in got.values()) == 1


async def test_an_event_wait_that_passes_its_deadline_goes_on_with_a_timeout_result():
    storage = InMemoryStorage()

    async def charge(node_input):
        got = await orchestra.wait_for_event("payment", timeout=60)
        return "cancelled" if got.timed_out else "paid"

    waits = open_waits((await graph(storage, {"charge": charge}).invoke_async("go")).interrupts)
    inbox = session_inbox(storage, "s1")
    assert await answers_for(waits, inbox) == {}
    answers = await answers_for(waits, inbox, at=now() + 61)
    result = await graph(storage, {"charge": charge}).invoke_async(answer(answers))
    assert result.results["charge"].output == "cancelled"
    await inbox.send("payment", {}, "late")  # too late for that wait: kept for a later one
    assert [e["key"] for e in await inbox.pending()] == ["late"]


async def test_a_tool_can_sleep():
    @tool
    async def remind_later(text: str) -> str:
        """Remind later.

        Args:
            text: what to remind
        """
        await orchestra.sleep(HOUR)
        return f"reminded: {text}"

    agent = Agent(
        model=ScriptedModel([ToolCall("remind_later", {"text": "call Bo"}), "Done."]), tools=[remind_later]
    )
    first = await agent.invoke_async("remind me")
    [wait] = open_waits(first.interrupts)
    result = await agent.invoke_async(answer(answers_due([wait], wait.until)))
    assert str(result) == "Done."
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "reminded: call Bo"}]


async def test_a_wait_outside_a_run_says_where_it_works():
    with pytest.raises(ConfigurationError, match="async function node or tool"):
        await orchestra.sleep(1)
    with pytest.raises(ConfigurationError, match="not both"):
        await orchestra.sleep(1, until=2)


def test_the_test_clock_adds_the_offset_its_file_holds(tmp_path, monkeypatch):
    clock = tmp_path / "clock"
    clock.write_text("3600")
    monkeypatch.setenv(CLOCK_ENV, str(clock))
    assert now() - HOUR == pytest.approx(__import__("time").time(), abs=60)


@pytest.mark.parametrize(
    ("text", "seconds"), [(90, 90.0), ("90s", 90.0), ("15m", 900.0), ("1h30m", 5400.0), ("2d", 172800.0)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def problems(nodes: str) -> list[str]:
    with pytest.raises(OrchestraSpecError) as info:
        parse_text(f"version: 1\nkind: graph\nid: g\nnodes:\n{nodes}", "pipeline.yaml")
    return list(info.value.errors)


def test_a_wait_node_with_a_bad_field_names_file_line_and_field():
    errors = problems("  - {id: a, wait: {for: 2x}}\n  - {id: b, wait: {until: '2026-12-01T09:00'}}\n")
    assert errors[0].startswith("pipeline.yaml:5:")
    assert "nodes[0].wait.for: not a duration: '2x'" in errors[0]
    assert errors[1].startswith("pipeline.yaml:6:"), errors
    assert "nodes[1].wait.until" in errors[1]
    assert "time zone" in errors[1]
    [both] = problems("  - {id: c, wait: {for: 1h, event: pay}}\n")
    assert both.startswith("pipeline.yaml:5:")
    assert "exactly one of for, until, event" in both
    [timer] = problems("  - {id: d, wait: {for: 1h, timeout: 2h}}\n")
    assert "nodes[0].wait.timeout: timeout is for an event wait" in timer
