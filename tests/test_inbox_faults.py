"""The event inbox under storage faults at random points (``FaultyStorage``): reads and writes refused,
and writes whose answer is lost after they took effect. Two inboxes over one storage stand for two
servers; every refused call is repeated, as a sweep or a client does. Whatever the schedule: each event
key is kept once, each event is taken by at most one wait, and a wait's answer, once given, never
changes."""

from __future__ import annotations

import json
import os

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra.errors import StorageError
from orchestra.inbox import EventInbox
from orchestra.storage import InMemoryStorage
from orchestra.testing import FaultyStorage
from orchestra.waits import Wait

EXAMPLES = 1000 if os.environ.get("ORCHESTRA_STRESS") == "1" else 60
KEY = "inbox/a/s1.json"

ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 1), st.integers(0, 3)),  # server, event key
        st.tuples(st.just("answer"), st.integers(0, 1), st.integers(0, 3)),  # server, wait
    ),
    min_size=1,
    max_size=14,
)
faults = st.lists(st.tuples(st.sampled_from(["read", "write"]), st.integers(1, 6), st.booleans()), max_size=4)


async def repeated(call, *args):
    for _ in range(20):
        try:
            return await call(*args)
        except StorageError:
            continue  # refused, or its answer lost: the caller asks again
    raise AssertionError("a call failed 20 times")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, faults=faults)
def test_each_event_is_kept_once_and_taken_by_one_wait_at_most(ops, faults):
    storage = FaultyStorage(InMemoryStorage())
    for operation, nth, after in faults:
        storage.fail(operation, KEY, nth=nth, after=after and operation == "write")
    servers = [EventInbox(storage, KEY), EventInbox(storage, KEY)]
    waits = [Wait(f"int-{n}", "event", event="payment") for n in range(4)]
    given_answers: dict[str, object] = {}

    async def main():
        for op, server, n in ops:
            inbox = servers[server]
            if op == "send":
                await repeated(inbox.send, "payment", {"n": n}, f"key-{n}")
            else:
                wait = waits[n]
                got = await repeated(inbox.answer, wait)
                if wait.interrupt_id in given_answers:
                    assert got == given_answers[wait.interrupt_id]  # decided once
                elif got is not None:
                    given_answers[wait.interrupt_id] = got

    anyio.run(main)
    found = anyio.run(storage.inner.read, KEY)
    document = json.loads(found[0]) if found is not None else {"events": [], "taken": {}}
    keys = [e["key"] for e in document["events"]]
    assert len(keys) == len(set(keys))  # each key kept once
    assert set(keys) == {f"key-{n}" for op, _, n in ops if op == "send"}
    taken = [k for k in document["taken"].values() if k is not None]
    assert len(taken) == len(set(taken))  # each event taken by one wait at most
    for interrupt_id, answer in given_answers.items():
        key = document["taken"][interrupt_id]
        assert answer["payload"] == next(e["payload"] for e in document["events"] if e["key"] == key)
