"""Durable waits across ``orchestra serve`` processes on one storage (issue 37, "Done when"): a run that
sleeps an hour (a test clock, ``ORCHESTRA_TEST_CLOCK``: no real hour) is left waiting, its server is
SIGKILLed, and two other servers sweep it; when the clock passes, it is resumed exactly once. It then waits
for an event, which is posted to one server and posted again (the same Idempotency-Key) to the other: it
is delivered once. Executions are counted by a side effect outside the run (a file each node writes to).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import auth, write_platform_config
from tests.server.test_platform_processes import Servers, final_record, get, wait_for
from tests.server.wait_steps import WAITING, calls

STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"


# PostgreSQL in CI (local files too with ORCHESTRA_STRESS=1: the same test, about 15 s more).
@pytest.fixture(params=["postgres", "file"] if STRESS else ["postgres"])
def storage_uri(request, tmp_path) -> str:
    if request.param == "file":
        return f"file:{tmp_path}/store"
    return f"'{request.getfixturevalue('postgres_uri')}'"


@pytest.fixture
def servers():
    made: list[Servers] = []
    yield lambda config, **env: made.append(Servers(config, env)) or made[-1]
    for group in made:
        group.close()


def order_config(root: Path, storage: str) -> Path:
    config = write_platform_config(root, storage)
    (root / "order.yaml").write_text(WAITING.format(id="order"))
    hosted = "  - {id: order, spec: order.yaml, workspace: acme}\n"
    config.write_text(config.read_text().replace("  - {id: other,", hosted + "  - {id: other,"))
    return config


def session_runs(url: str) -> list[dict]:
    return get(url, "/api/v1/runs?agent_id=order&session_id=s1&limit=50")["runs"]


def waiting_on(url: str, kind: str) -> dict | None:
    """The session's newest run, if it ended waiting on a wait of ``kind``."""
    runs = session_runs(url)
    newest = runs[0] if runs else None
    if newest is None or newest["status"] != "interrupted":
        return None
    return newest if [w["kind"] for w in newest["waiting"]] == [kind] else None


def post_event(url: str, run_id: str, key: str) -> dict:
    reply = httpx.post(
        f"{url}/api/v1/runs/{run_id}/events",
        json={"name": "payment", "payload": {"amount": 42}},
        headers={**auth(), "Idempotency-Key": key},
        timeout=30,
    )
    assert reply.status_code == 202, reply.text
    return reply.json()


def test_a_sleeping_run_survives_its_server_and_wakes_once_then_takes_its_event_once(
    storage_uri, tmp_path, servers
):
    clock, counted = tmp_path / "clock", tmp_path / "calls"
    clock.write_text("0")
    group = servers(
        order_config(tmp_path, storage_uri),
        ORCHESTRA_TEST_CLOCK=str(clock),
        ORCHESTRA_TEST_CALLS=str(counted),
    )
    first = group.start()
    started = httpx.post(
        f"{first}/api/v1/agents/order/runs",
        json={"input": "order 7", "session_id": "s1"},
        headers=auth(),
        timeout=30,
    ).json()
    record = final_record(first, started["run_id"])
    assert record["status"] == "interrupted"
    assert [w["kind"] for w in record["waiting"]] == ["timer"]
    group.kill(first)  # the run is saved waiting: no process holds it

    second, third = group.start(), group.start()
    # Both sweep it; until the clock passes the hour, neither wakes it.
    assert waiting_on(second, "timer") is not None
    time.sleep(1.0)  # several sweeps of both (runs.sweep_s 0.3): a wake now would be a bug
    assert calls(counted) == ["before"]

    clock.write_text("3601")  # an hour and a second later
    waiting = wait_for(lambda: waiting_on(third, "event"), timeout=90)
    assert calls(counted) == ["before", "middle"]  # woken once, by one of the two servers

    # The event, to one server; the same post again (same key) to the other.
    sent = post_event(third, started["run_id"], "pay-7")
    again = post_event(second, waiting["run_id"], "pay-7")
    assert (sent["duplicate"], again["duplicate"]) == (False, True)
    done = wait_for(
        lambda: (r := session_runs(second)) and r[0]["status"] == "completed" and r[0], timeout=90
    )
    assert done["output"] == "shipped" or "shipped" in json.dumps(done["output"])
    assert post_event(second, started["run_id"], "pay-7")["duplicate"] is True
    time.sleep(1.0)  # more sweeps: a second wake or delivery now would be a bug
    paid = json.dumps({"event": "payment", "payload": {"amount": 42}, "timed_out": False}, sort_keys=True)
    assert calls(counted) == ["before", "middle", f"after {paid}"]
    statuses = [r["status"] for r in session_runs(second)]
    assert statuses == ["completed", "answered", "answered"], statuses
