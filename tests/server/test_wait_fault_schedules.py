"""Waking a waiting run under storage faults at random points around the wait and its claims (the
``waits/`` entries, the session's inbox, the wake's Idempotency-Key entry): refused reads, writes and
deletes, and writes whose answer is lost after they took effect. The server's sweeps and the event's
sender repeat what failed. Whatever the schedule, the run sleeps, wakes once, takes its event once and
ships once (counted by a file outside the run)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import httpx
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from orchestra.testing import FaultyStorage
from tests.server.conftest import Server, auth
from tests.server.test_waits_across_servers import order_config
from tests.server.wait_steps import calls

STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"
# CI runs the same few schedules every time (and the explicit examples below); ORCHESTRA_STRESS=1 searches.
EXAMPLES = 30 if STRESS else 3

faults = st.lists(
    st.tuples(
        st.sampled_from(["read", "write", "delete"]),
        st.sampled_from(["waits/", "inbox/", "idempotency/"]),
        st.booleans(),  # after: the write took effect, its answer was lost
        st.integers(1, 3),
    ),
    min_size=1,
    max_size=5,
)


def until(predicate, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def newest(http: httpx.Client) -> dict:
    runs = http.get("/api/v1/runs", params={"agent_id": "order", "session_id": "s1"}).json()["runs"]
    return runs[0] if runs else {}


def post_until_accepted(http: httpx.Client, run_id: str) -> dict:
    body = {"name": "payment", "payload": {"amount": 3}}

    def post() -> dict | None:
        reply = http.post(f"/api/v1/runs/{run_id}/events", json=body, headers={"Idempotency-Key": "pay-3"})
        return reply.json() if reply.status_code == 202 else None  # a refused storage call: 503, sent again

    return until(post)


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=not STRESS
)
@given(plan=faults)
@example(plan=[("write", "waits/", False, 1)])  # the answering run's entry refused: a sweep writes it later
# The event wake's Idempotency-Key write refused after the inbox decided the wait took the event: the
# event is no longer "pending", yet sweeps must still look (the ORCHESTRA_STRESS=1 failure: the run never
# completed, wait_sweep_failed logged, until the entry named its event waits).
@example(plan=[("write", "idempotency/", False, 2)])
def test_a_run_wakes_once_and_takes_its_event_once_under_storage_faults(plan):
    note(f"fault plan: {plan!r}")  # a failing search prints the plan it found
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clock = root / "clock"
        clock.write_text("0")
        counted = root / "calls"
        os.environ.update(ORCHESTRA_TEST_CLOCK=str(clock), ORCHESTRA_TEST_CALLS=str(counted))
        try:
            with Server(order_config(root, f"file:{root}/store")) as server:
                runtime = server.app.state.runtime
                runtime.root = storage = FaultyStorage(runtime.root)
                with httpx.Client(base_url=server.url, headers=auth(), timeout=30) as http:
                    started = http.post("/api/v1/agents/order/runs", json={"input": "o", "session_id": "s1"})
                    run_id = started.json()["run_id"]
                    until(lambda: newest(http).get("status") == "interrupted")
                    for operation, where, after, nth in plan:
                        storage.fail(operation, where, after=after and operation == "write", nth=nth)
                    clock.write_text("3601")
                    until(lambda: [w["kind"] for w in newest(http).get("waiting", [])] == ["event"])
                    post_until_accepted(http, run_id)
                    assert post_until_accepted(http, run_id)["duplicate"] is True
                    until(lambda: newest(http).get("status") == "completed")
                    time.sleep(0.5)  # more sweeps (runs.sweep_s 0.3): a second wake now would be a bug
        finally:
            os.environ.pop("ORCHESTRA_TEST_CLOCK", None)
            os.environ.pop("ORCHESTRA_TEST_CALLS", None)
        paid = '{"event": "payment", "payload": {"amount": 3}, "timed_out": false}'
        assert calls(counted) == ["before", "middle", f"after {paid}"], plan
