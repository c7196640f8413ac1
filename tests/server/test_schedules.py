"""Scheduled runs across ``orchestra serve`` processes on one storage (issue 37 item 4):

- three servers run an every-second schedule, one of them SIGKILLed and restarted: every tick has one
  record and one run, and the counted agent's model saw each tick's input once (a side effect outside
  the runs);
- ticks missed while every server was down follow their schedule's policy: skipped, or run once;
- the API: create, list, pause, resume, run now, delete, and what it refuses;
- tick records are pruned to what the config keeps, and servers whose cursor is behind the pruned ones
  run none of them again.

The CI stretch is ~12 ticks; ``ORCHESTRA_STRESS=1`` runs the issue's minute.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import os
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest

from orchestra.hosting.scheduler import ScheduleStore
from orchestra.hosting.schedules import PRUNE_STEP, TickRecord, TickRetention, tick_key
from orchestra.session import uuid7
from orchestra.storage import ForwardingStorage, PrefixedStorage, delete_many, storage_from_uri, write_many
from orchestra.testing import FaultyStorage
from tests.server.conftest import FAST_RUNS, Server, auth, counted_config
from tests.server.test_platform_processes import Servers, final_record, get, wait_for

STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"
TICKS = 60 if STRESS else 12


@pytest.fixture
def servers():
    made: list[Servers] = []

    def make(config: Path, **env: str) -> Servers:
        made.append(Servers(config, env))
        return made[-1]

    yield make
    for group in made:
        group.close()


def schedule_config(root: Path, storage: str, schedules: str, runs: str = FAST_RUNS) -> Path:
    config = counted_config(root, storage, runs)
    config.write_text(config.read_text() + "schedules:\n" + schedules)
    return config


def calls_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def ticks_of(url: str, schedule_id: str) -> list[dict]:
    return get(url, f"/api/v1/schedules/{schedule_id}?ticks=1000")["ticks"]


def test_three_servers_run_each_tick_once_with_one_killed_and_restarted(tmp_path, servers):
    calls = tmp_path / "calls.txt"
    every = '  - {id: every, agent: counted, cron: "* * * * * *", input: "tick {tick}", session: none, missed: run_once}\n'
    group = servers(
        schedule_config(tmp_path, f"file:{tmp_path}/store", every), ORCHESTRA_TEST_CALLS=str(calls)
    )
    urls = [group.start(), group.start(), group.start()]
    wait_for(lambda: len(ticks_of(urls[0], "every")) >= TICKS // 3)
    group.kill(urls[1])  # SIGKILL: whatever it was doing (a claim, a run) is left to the others
    killed_at = len(ticks_of(urls[0], "every"))
    wait_for(lambda: len(ticks_of(urls[0], "every")) >= killed_at + 3)
    urls[1] = group.start()
    wait_for(lambda: len(ticks_of(urls[1], "every")) >= TICKS, timeout=TICKS * 10)
    paused = httpx.post(f"{urls[2]}/api/v1/schedules/every/pause", headers=auth(), timeout=30)
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True

    def settled() -> list[dict] | None:
        # Every tick's run ended and its model call was made (a tick claimed just as the pause was read
        # is waited for too).
        ticks = ticks_of(urls[0], "every")
        if any(t["status"] != "started" for t in ticks):
            return None
        runs = [get(urls[0], f"/api/v1/runs/{t['run_id']}") for t in ticks]
        if any(r.get("status") in (None, "queued", "executing") for r in runs):
            return None
        return ticks if len(calls_of(calls)) >= len(ticks) else None

    ticks = wait_for(settled, timeout=120)
    assert len(ticks) >= TICKS
    times = [datetime.fromisoformat(t["first"]) for t in ticks]
    # One record per second from the first to the last: no tick lost, none twice, none missed.
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(times)), times
    assert all(t["count"] == 1 and not t["missed"] and t["first"] == t["last"] for t in ticks)
    for tick in ticks:
        record = final_record(urls[0], tick["run_id"])
        assert record["status"] == "completed", record
        assert record["metadata"]["schedule_id"] == "every"
        assert record["metadata"]["schedule_tick"] == tick["first"]
    # The side effect: the model saw each tick's input once (input "tick <time>", read in UTC).
    counted = collections.Counter(calls_of(calls))
    assert counted == collections.Counter(f"tick {t['first']}" for t in ticks), counted


def test_missed_ticks_are_skipped_or_run_once_by_policy(tmp_path, servers):
    calls = tmp_path / "calls.txt"
    schedules = (
        '  - {id: skipper, agent: counted, cron: "* * * * * *", input: "skip {tick}", session: none, '
        "missed: skip, missed_after_s: 2}\n"
        '  - {id: catcher, agent: counted, cron: "* * * * * *", input: "catch {tick}", session: new, '
        "missed: run_once, missed_after_s: 2}\n"
    )
    group = servers(
        schedule_config(tmp_path, f"sqlite:{tmp_path}/store.db", schedules), ORCHESTRA_TEST_CALLS=str(calls)
    )
    url = group.start()
    wait_for(lambda: len(ticks_of(url, "skipper")) >= 2 and len(ticks_of(url, "catcher")) >= 2)
    group.kill(url)  # every server is down now
    down = time.monotonic()
    while time.monotonic() - down < 6:  # ticks pass with no server (more than missed_after_s)
        time.sleep(0.5)
    url = group.start()

    def missed(schedule_id: str) -> dict | None:
        return next((t for t in ticks_of(url, schedule_id) if t["missed"]), None)

    skipped = wait_for(lambda: missed("skipper"))
    caught = wait_for(lambda: missed("catcher"))
    # Both saw the same stretch without a server: several ticks, accounted for by one record each.
    assert skipped["count"] >= 3, skipped
    assert caught["count"] >= 3, caught
    assert (skipped["status"], skipped["policy"], skipped["run_id"]) == ("skipped", "skip", None)
    assert (caught["status"], caught["policy"]) == ("started", "run_once")
    run = final_record(url, caught["run_id"])
    assert run["status"] == "completed", run
    assert run["metadata"]["schedule_missed"] == str(caught["count"])
    assert run["input"] == f"catch {caught['last']}"
    assert run["session_id"].startswith("catcher-")  # session: new
    # Ticks go on after the missed ones, one record each.
    wait_for(lambda: ticks_of(url, "skipper")[-1]["first"] > skipped["last"])
    wait_for(lambda: ticks_of(url, "catcher")[-1]["first"] > caught["last"])
    lines = calls_of(calls)
    first, last = datetime.fromisoformat(skipped["first"]), datetime.fromisoformat(skipped["last"])
    in_gap = [
        line
        for line in lines
        if line.startswith("skip ") and first <= datetime.fromisoformat(line[5:]) <= last
    ]
    assert in_gap == []  # nothing ran for the skipped ticks
    first, last = datetime.fromisoformat(caught["first"]), datetime.fromisoformat(caught["last"])
    in_gap = [
        line
        for line in lines
        if line.startswith("catch ") and first <= datetime.fromisoformat(line[6:]) <= last
    ]
    assert in_gap == [f"catch {caught['last']}"]  # one run for all of them


@pytest.fixture
def scheduled(tmp_path, monkeypatch):
    """A server in this process whose config has a daily schedule."""
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(tmp_path / "calls.txt"))
    daily = (
        '  - {id: daily, agent: counted, cron: "0 7 * * *", timezone: Europe/Paris, input: "report {date}"}\n'
    )
    with Server(schedule_config(tmp_path, f"file:{tmp_path}/store", daily)) as running:
        yield running


def test_the_schedules_api(scheduled):
    url, headers = scheduled.url, auth()
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        listed = http.get("/api/v1/schedules").json()["schedules"]
        assert [(s["id"], s["source"], s["timezone"]) for s in listed] == [
            ("daily", "config", "Europe/Paris")
        ]
        body = {"id": "hourly", "agent": "chat", "cron": "0 * * * *", "input": "hello", "session": "continue"}
        made = http.post("/api/v1/schedules", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["source"] == "api"
        assert made.json()["workspace"] == "acme"
        assert http.post("/api/v1/schedules", json=body).status_code == 409
        bad = http.post("/api/v1/schedules", json={**body, "id": "bad", "cron": "every day"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_schedule"), bad.text
        zone = http.post("/api/v1/schedules", json={**body, "id": "bad", "timezone": "Mars/Olympus"})
        assert zone.status_code == 422
        assert "Mars/Olympus" in zone.text
        other = http.post("/api/v1/schedules", json={**body, "id": "x", "agent": "other"})
        assert other.status_code == 404  # another workspace's agent
        assert http.post("/api/v1/schedules/hourly/pause").json()["paused"] is True
        assert http.post("/api/v1/schedules/hourly/resume").json()["paused"] is False
        started = http.post("/api/v1/schedules/hourly/run")
        assert started.status_code == 202, started.text
        run = final_record(url, started.json()["run_id"])
        assert (run["status"], run["input"], run["session_id"]) == ("completed", "hello", "hourly")
        assert run["metadata"] == {"schedule_id": "hourly", "schedule_trigger": "manual"}
        assert http.delete("/api/v1/schedules/daily").status_code == 409  # in the config
        assert http.delete("/api/v1/schedules/hourly").status_code == 204
        assert http.get("/api/v1/schedules/hourly").status_code == 404
        # Another workspace sees none of them.
        globex = http.get("/api/v1/schedules", headers=auth("globex")).json()["schedules"]
        assert globex == []


def test_a_claim_left_by_a_gone_server_is_taken_over_and_run_once(tmp_path, monkeypatch):
    # What a server SIGKILLed between a tick's record and its run leaves: the tick's open marker and its
    # record "claimed" by a server that no longer says it is alive. A sweep takes the claim over and
    # queues the run the record names, once.
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    daily = '  - {id: daily, agent: counted, cron: "0 7 * * *", input: "left {tick}", session: none}\n'
    config = schedule_config(tmp_path, f"file:{tmp_path}/store", daily)
    tick = "2026-12-01T07:00:00+00:00"
    left = TickRecord(
        schedule_id="daily",
        first=tick,
        last=tick,
        status="claimed",
        run_id=str(uuid7()),
        server="a-server-that-died",
        claimed_at=tick,
    )
    workspace = PrefixedStorage(storage_from_uri(f"file:{tmp_path}/store"), "ws/acme")
    anyio.run(workspace.write, "schedule-ticks/daily/20261201T070000Z.json", left.as_json())
    anyio.run(workspace.write, "schedule-open/daily/20261201T070000Z", b"")
    with Server(config) as server:
        record = wait_for(
            lambda: next((t for t in ticks_of(server.url, "daily") if t["status"] == "started"), None)
        )
        assert (record["run_id"], record["taken_over"]) == (left.run_id, 1)
        assert record["server"] != "a-server-that-died"
        run = final_record(server.url, left.run_id)
        assert (run["status"], run["input"]) == ("completed", f"left {tick}")
        wait_for(lambda: not anyio.run(workspace.list, "schedule-open/"))  # the marker is gone
    assert calls_of(calls) == [f"left {tick}"]


def test_a_tick_whose_run_is_refused_says_why(tmp_path, monkeypatch):
    # Every tick on one session, whose first run waits on a gate and whose queue holds none: the next
    # tick's run is refused (429 queue_full), and its record says so instead of "started".
    gate = tmp_path / "gate"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("ORCHESTRA_TEST_GATE", str(gate))
    every = '  - {id: busy, agent: counted, cron: "* * * * * *", input: "slow {tick}", session: continue}\n'
    runs = FAST_RUNS.replace("sweep_s: 0.3}", "sweep_s: 0.3, max_queue: 0}")
    with Server(schedule_config(tmp_path, f"file:{tmp_path}/store", every, runs)) as server:
        refused = wait_for(
            lambda: next((t for t in ticks_of(server.url, "busy") if t["status"] == "refused"), None)
        )
        gate.write_text("open")
        assert refused["error"].startswith("queue_full: "), refused
        unknown = httpx.get(f"{server.url}/api/v1/runs/{refused['run_id']}", headers=auth(), timeout=30)
        assert unknown.status_code == 404  # nothing of the refused run was kept
        started = [t for t in ticks_of(server.url, "busy") if t["status"] == "started"]
        assert started  # the one that held the session


@pytest.fixture(params=["file", "postgres"])
def pruned_storage(request, tmp_path) -> str:
    if request.param == "file":
        return f"file:{tmp_path}/store"
    return f"'{request.getfixturevalue('postgres_uri')}'"


def tick_runs(url: str) -> list[dict] | None:
    """The runs of schedule ``every``'s ticks, once each has ended (None before)."""
    runs = get(url, "/api/v1/runs?agent_id=counted&metadata=schedule_id:every&limit=500")["runs"]
    return None if any(r["status"] in ("queued", "executing") for r in runs) else runs


def assert_one_run_a_tick(runs: list[dict]) -> None:
    """Each tick from the first to the last started one run (a run taken over from a killed server keeps
    its id: a tick run again would be a second run), and it completed."""
    counted = collections.Counter(r["metadata"]["schedule_tick"] for r in runs)
    assert max(counted.values()) == 1, [tick for tick, n in counted.items() if n > 1]
    times = sorted(datetime.fromisoformat(tick) for tick in counted)
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(times)), times
    assert all(r["status"] == "completed" for r in runs), runs


def test_pruned_ticks_stay_bounded_and_none_runs_twice_across_two_servers(tmp_path, servers, pruned_storage):
    # One server runs an every-second schedule keeping 3 tick records, pruning each second. It is killed,
    # and the cursor hint (written without fsync: a power cut can take it back) is set back to the
    # schedule's start. Two servers start from there, pruning as they go: they pass ticks whose records
    # were pruned, and must run none of them again. (Runs are counted, not the model's calls: a run the
    # SIGKILL stopped after its call runs again when taken over, the resume contract.)
    calls = tmp_path / "calls.txt"
    every = '  - {id: every, agent: counted, cron: "* * * * * *", input: "tick {tick}", session: none}\n'
    config = schedule_config(tmp_path, pruned_storage, every)
    config.write_text(config.read_text() + "schedule_ticks: {keep: 3, prune_every_s: 1}\n")
    group = servers(config, ORCHESTRA_TEST_CALLS=str(calls))
    first = group.start()
    wait_for(lambda: len(calls_of(calls)) >= 5)
    group.kill(first)
    workspace = PrefixedStorage(storage_from_uri(pruned_storage.strip("'")), "ws/acme")
    start = datetime.fromisoformat(calls_of(calls)[0].removeprefix("tick ")) - timedelta(seconds=1)
    anyio.run(workspace.write, "schedule-cursor/every", start.isoformat().encode())
    with concurrent.futures.ThreadPoolExecutor(2) as starting:  # (a server takes seconds to start)
        urls = list(starting.map(lambda _: group.start(), range(2)))
    ran = len(calls_of(calls))
    wait_for(lambda: len(calls_of(calls)) >= ran + 4, timeout=60)
    paused = httpx.post(f"{urls[0]}/api/v1/schedules/every/pause", headers=auth(), timeout=30)
    assert paused.status_code == 200, paused.text

    def settled() -> list[dict] | None:
        ticks = ticks_of(urls[1], "every")
        return ticks if all(t["status"] == "started" for t in ticks) else None

    ticks = wait_for(settled, timeout=120)
    runs = wait_for(lambda: tick_runs(urls[1]), timeout=120)
    assert_one_run_a_tick(runs)
    # The servers pruned as they went: nothing is left below the floor, and fewer records are kept than
    # ticks ran (unpruned: one a tick, 9 at least).
    floor = anyio.run(workspace.read, "schedule-floor/every")
    assert floor is not None
    assert all(tick_key(datetime.fromisoformat(t["first"])) >= floor[0].decode() for t in ticks)
    assert len(ticks) < len(runs), [t["first"] for t in ticks]
    # How many are kept past 3 depends on the claims open at the last prune (a slow server's, under load).
    # With none open, the next prune keeps exactly 3.
    wait_for(lambda: not anyio.run(workspace.list, "schedule-open/every/"))
    store = ScheduleStore(workspace, workspace)
    anyio.run(store.prune, "every", TickRetention(keep=3), datetime.now(UTC))
    assert len(anyio.run(store.tick_keys, "every")) == 3


class InOrderDeletes(FaultyStorage):
    """Batch deletes one key after another, in order, as local files make them: one that fails half way
    leaves the keys before it deleted and the keys after it in place."""

    async def delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            await self.delete(key)


def test_a_prune_whose_deletes_fail_half_way_runs_nothing_twice_and_the_next_finishes(tmp_path, monkeypatch):
    # A server keeps every record until it is told to keep 2; its first prune then deletes several, and
    # the second delete is refused. A server that starts from the schedule's start (its cursor hint set
    # back) passes the half-pruned ticks: the oldest record gone, others still there below the floor. No
    # tick runs twice, and a later prune deletes what was left.
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    every = '  - {id: every, agent: counted, cron: "* * * * * *", input: "tick {tick}", session: none}\n'
    config = schedule_config(tmp_path, f"file:{tmp_path}/store", every)
    workspace = PrefixedStorage(storage_from_uri(f"file:{tmp_path}/store"), "ws/acme")
    with Server(config) as server:
        runtime = server.app.state.runtime
        runtime.root = storage = InOrderDeletes(runtime.root)
        made = wait_for(lambda: (found := ticks_of(server.url, "every"))[5:] and found)
        oldest, second = (tick_key(datetime.fromisoformat(t["first"])) for t in made[:2])
        storage.fail("delete", f"schedule-ticks/every/{second}")
        runtime.schedules.retention = TickRetention(keep=2, prune_every_s=1)
        wait_for(lambda: not storage.faults)
        left = [tick_key(datetime.fromisoformat(t["first"])) for t in ticks_of(server.url, "every")]
    floor = anyio.run(workspace.read, "schedule-floor/every")
    assert floor is not None
    assert oldest not in left
    assert second in left
    assert second < floor[0].decode()  # the prune stopped half way: a record below the floor is left
    start = datetime.fromisoformat(calls_of(calls)[0].removeprefix("tick ")) - timedelta(seconds=1)
    anyio.run(workspace.write, "schedule-cursor/every", start.isoformat().encode())
    config.write_text(config.read_text() + "schedule_ticks: {keep: 2, prune_every_s: 1}\n")
    with Server(config) as server:
        ran = len(calls_of(calls))
        wait_for(lambda: len(calls_of(calls)) >= ran + 3)
        paused = httpx.post(f"{server.url}/api/v1/schedules/every/pause", headers=auth(), timeout=30)
        assert paused.status_code == 200, paused.text

        def started() -> list[dict] | None:
            found = ticks_of(server.url, "every")
            return found if all(t["status"] == "started" for t in found) else None

        ticks = wait_for(started)
        floor = anyio.run(workspace.read, "schedule-floor/every")
        assert floor is not None
        assert all(tick_key(datetime.fromisoformat(t["first"])) >= floor[0].decode() for t in ticks), ticks
        assert len(ticks) <= 3
        assert_one_run_a_tick(wait_for(lambda: tick_runs(server.url)))


def test_a_claim_left_below_the_floor_is_deleted_and_never_run(tmp_path, monkeypatch):
    # What a server that was behind leaves when it is killed between creating the record of a tick whose
    # record had been pruned and reading the floor: a record "claimed" below the floor, and its marker.
    # The tick ran already: a sweep deletes the record and the marker, and runs nothing.
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    daily = '  - {id: daily, agent: counted, cron: "0 7 * * *", input: "left {tick}", session: none}\n'
    config = schedule_config(tmp_path, f"file:{tmp_path}/store", daily)
    kept, tick = "2026-12-01T07:00:00+00:00", "2026-11-30T07:00:00+00:00"
    common = {"schedule_id": "daily", "run_id": str(uuid7()), "claimed_at": kept}
    floor = TickRecord(first=kept, last=kept, status="started", server="a-server", **common)
    left = TickRecord(first=tick, last=tick, status="claimed", server="a-server-that-died", **common)
    left.run_id = str(uuid7())
    workspace = PrefixedStorage(storage_from_uri(f"file:{tmp_path}/store"), "ws/acme")
    anyio.run(workspace.write, "schedule-ticks/daily/20261201T070000Z.json", floor.as_json())
    anyio.run(workspace.write, "schedule-floor/daily", b"20261201T070000Z")
    anyio.run(workspace.write, "schedule-ticks/daily/20261130T070000Z.json", left.as_json())
    anyio.run(workspace.write, "schedule-open/daily/20261130T070000Z", b"")
    with Server(config) as server:
        wait_for(lambda: not anyio.run(workspace.list, "schedule-open/"))  # swept
        assert [t["first"] for t in ticks_of(server.url, "daily")] == [kept]
        unknown = httpx.get(f"{server.url}/api/v1/runs/{left.run_id}", headers=auth(), timeout=30)
        assert unknown.status_code == 404
    assert calls_of(calls) == []


class HeldDeletes(ForwardingStorage):
    """Deletes of tick records wait until ``released`` is set (each batch's size is noted); the keys of
    open markers written through it (durably) are noted too."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.released = threading.Event()
        self.batches: list[int] = []
        self.opened: list[str] = []

    async def write(self, key: str, data: bytes, *, expect=None) -> str:
        if "/schedule-open/" in key:
            self.opened.append(key)
        return await super().write(key, data, expect=expect)

    async def delete_many(self, keys: Sequence[str]) -> None:
        if any("/schedule-ticks/" in key for key in keys):
            self.batches.append(len(keys))
            # (abandoned on cancel: a server that stops does not wait for the release)
            await anyio.to_thread.run_sync(self.released.wait, abandon_on_cancel=True)
        await delete_many(self.inner, keys)


def test_a_large_backlog_is_pruned_in_steps_while_the_ticks_go_on(tmp_path, monkeypatch):
    # A schedule's first prune after an upgrade meets a backlog of old records. It deletes them in steps of
    # PRUNE_STEP, each step's floor stored before its deletes, in a task of its own: while its deletes are
    # held, the server goes on claiming ticks (a prune inline in the tick loop would hold them), and no
    # second prune of the schedule starts. Open markers are written durably (through the synced storage).
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    every = '  - {id: every, agent: counted, cron: "* * * * * *", input: "tick {tick}", session: none}\n'
    config = schedule_config(tmp_path, f"file:{tmp_path}/store", every)
    config.write_text(config.read_text() + "schedule_ticks: {keep: 3, prune_every_s: 1}\n")
    workspace = PrefixedStorage(storage_from_uri(f"file:{tmp_path}/store"), "ws/acme")
    backlog = 2 * PRUNE_STEP + 500
    day_ago = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    old = [tick_key(day_ago + timedelta(seconds=s)) for s in range(backlog)]
    done = {"schedule_id": "every", "status": "started", "server": "an-old-server", "claimed_at": "x"}
    records = [
        (f"schedule-ticks/every/{key}.json", TickRecord(first=key, last=key, **done).as_json()) for key in old
    ]
    anyio.run(write_many, workspace, records)
    server = Server(config)
    server.app.state.runtime.root = storage = HeldDeletes(server.app.state.runtime.root)
    try:
        with server:
            wait_for(lambda: storage.batches)
            # The first step: its floor, at the cap, stored before its deletes (which wait).
            floor = anyio.run(workspace.read, "schedule-floor/every")
            assert floor is not None
            assert floor[0].decode() == old[PRUNE_STEP]
            ran = len(calls_of(calls))
            wait_for(lambda: len(calls_of(calls)) >= ran + 3)  # the ticks go on meanwhile
            assert storage.batches == [PRUNE_STEP]  # one prune of the schedule at a time
            storage.released.set()
            left = wait_for(
                lambda: (
                    (keys := anyio.run(workspace.list, "schedule-ticks/every/")) and len(keys) < 10 and keys
                )
            )
            assert not any(key.removesuffix(".json") in old for key in left)
            assert storage.batches[:2] == [PRUNE_STEP, PRUNE_STEP]
            assert all(size <= PRUNE_STEP for size in storage.batches)
            assert storage.opened  # each tick's marker went through the synced storage
    finally:
        storage.released.set()
    assert len(set(calls_of(calls))) == len(calls_of(calls))  # no tick ran twice
