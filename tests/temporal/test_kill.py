"""Two workers, one SIGKILLed mid-run: the other finishes the run, and nodes that had completed never run
again (an in-flight node at most twice). 3 rounds in CI; ORCHESTRA_STRESS=1 runs 10."""

import os
import random
import time
from collections import Counter

import anyio
import pytest

from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.spec import parse_text
from orchestra.storage import LocalFileStorage
from tests.temporal.conftest import workers

ROUNDS = 10 if os.environ.get("ORCHESTRA_STRESS") else 3
NODES = ["start", "a1", "a2", "a3", "a4", "join", "c1", "c2", "c3", "c4", "c5"]
SPEC = (
    "version: 1\nkind: graph\nid: kill-temporal\nnodes:\n"
    + "".join(f"  - {{id: {n}, function: 'tests.support:slow_step'}}\n" for n in NODES)
    + "edges:\n"
    + "".join(
        f"  - {{from: {a}, to: {b}}}\n"
        for a, b in [
            ("start", "a1"),
            ("start", "a2"),
            ("start", "a3"),
            ("start", "a4"),
            ("a1", "join"),
            ("a2", "join"),
            ("a3", "join"),
            ("a4", "join"),
            ("join", "c1"),
            ("c1", "c2"),
            ("c2", "c3"),
            ("c3", "c4"),
            ("c4", "c5"),
        ]
    )
)


def start_run(address: str, queue: str, spec_id: str, session: str, root, task: str):
    """Start ``spec_id`` on ``queue`` as run ``session`` (saved under ``root``); its workflow handle."""
    from orchestra import temporal

    async def start():
        target = temporal.TemporalTarget(address, "default", queue)
        client = await temporal.connect(target)
        request = temporal.RunRequest(
            spec_id=spec_id,
            session_id=session,
            storage=f"file:{root}",
            task=task,
            run_id=session,
            heartbeat_seconds=2,
        )
        return await temporal.start_run(client, target, request)

    return anyio.run(start)


def completed(root, session):
    doc = anyio.run(Journal(LocalFileStorage(root), ScopeLayout(session, "multiAgent", "kill-temporal")).load)
    if doc is None:
        return set()
    return {
        n[len("node/") :]
        for n, r in doc.fields.items()
        if n.startswith("node/") and r["status"] == "completed"
    }


@pytest.mark.timeout(600)
def test_a_killed_worker_costs_a_retry_and_nothing_more(temporal_address, tmp_path, monkeypatch):

    spec = tmp_path / "kill.yaml"
    spec.write_text(SPEC)
    parse_text(SPEC, "kill.yaml")
    root = tmp_path / "store"
    rng = random.Random(7)
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.3")
    for round_number in range(ROUNDS):
        calls = tmp_path / f"calls-{round_number}"
        monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
        queue = f"q-kill-{round_number}"
        session = f"k{round_number}"
        with workers(temporal_address, queue, spec, count=2) as pool:
            handle = start_run(temporal_address, queue, "kill-temporal", session, root, "go")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (
                not calls.exists() or len(calls.read_text().split()) < 3 + rng.randint(0, 5)
            ):
                time.sleep(0.05)
            pool.kill(pool.running[rng.randrange(2)])
            done_before = completed(root, session)
            summary = anyio.run(handle.result)
        assert summary["status"] == "completed", summary
        runs = Counter(calls.read_text().split())
        assert set(runs) == set(NODES)
        for node in done_before:
            assert runs[node] == 1, f"round {round_number}: {node} had completed but ran {runs[node]} times"
        assert all(count <= 2 for count in runs.values()), runs
        assert completed(root, session) == set(NODES)


EFFECTS_SPEC = """version: 1
kind: graph
id: kill-effects
agents:
  - {name: sender, model: 'function:tests.support:effect_planner', tools: ['tests.support:send_effect']}
nodes:
  - {id: sender, agent: sender}
"""


@pytest.mark.timeout(600)
def test_a_side_effecting_tool_runs_once_when_its_worker_is_killed(temporal_address, tmp_path, monkeypatch):
    """An agent node's sends go through a service that counts effects by Idempotency-Key; one of two
    workers is SIGKILLed while the node runs. Temporal retries the activity on the other worker, which
    resumes the node's open turn from the blob its tools checkpointed: every effect happened once."""
    from tests.effects_service import EffectService

    spec = tmp_path / "effects.yaml"
    spec.write_text(EFFECTS_SPEC)
    parse_text(EFFECTS_SPEC, "effects.yaml")
    root = tmp_path / "store"
    rng = random.Random(11)
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.4")
    with EffectService() as service:
        monkeypatch.setenv("ORCHESTRA_TEST_EFFECTS_URL", service.url)
        for round_number in range(2 if ROUNDS == 3 else ROUNDS):
            service.reset()
            queue = f"q-effects-{round_number}"
            session = f"e{round_number}"
            with workers(temporal_address, queue, spec, count=2) as pool:
                handle = start_run(temporal_address, queue, "kill-effects", session, root, "send them")
                wanted = 1 + rng.randint(0, 1)  # kill after one or two effects
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and sum(service.effects.values()) < wanted:
                    time.sleep(0.02)
                time.sleep(rng.uniform(0.0, 0.3))
                pool.kill()  # both: the one running the node (the other is idle)
                pool.start()
                summary = anyio.run(handle.result)
            assert summary["status"] == "completed", summary
            assert dict(service.effects) == {"a": 1, "b": 1, "c": 1}, f"round {round_number}"


MAP_SPEC = """
version: 1
kind: graph
id: kill-map
nodes:
  - {id: split, function: 'tests.orchestration_steps:split'}
  - id: each
    map: {node: 'tests.orchestration_steps:slow_item', max_concurrency: 4}
  - {id: total, function: 'tests.orchestration_steps:total'}
edges:
  - {from: split, to: each}
  - {from: each, to: total}
"""


def completed_items(root, session):
    doc = anyio.run(Journal(LocalFileStorage(root), ScopeLayout(session, "multiAgent", "kill-map")).load)
    if doc is None:
        return set()
    done = {
        f"each[{name.rsplit('/', 1)[1]}]"
        for name, record in doc.fields.items()
        if name.startswith("map/each/item/") and record.get("status") == "completed"
    }
    if (doc.fields.get("node/each") or {}).get("status") == "completed":
        done |= {f"each[{i}]" for i in range(16)}  # the map completed: its items' records went with it
    return done


@pytest.mark.timeout(600)
def test_a_killed_worker_in_a_fan_out_reruns_no_completed_item(temporal_address, tmp_path, monkeypatch):

    spec = tmp_path / "kill-map.yaml"
    spec.write_text(MAP_SPEC)
    parse_text(MAP_SPEC, "kill-map.yaml")
    root = tmp_path / "store"
    rng = random.Random(11)
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.3")
    monkeypatch.setenv("ORCHESTRA_TEST_ITEMS", "16")
    items = [f"each[{i}]" for i in range(16)]
    mid_map = 0
    for round_number in range(ROUNDS):
        calls = tmp_path / f"map-calls-{round_number}"
        monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
        queue = f"q-kill-map-{round_number}"
        session = f"m{round_number}"
        with workers(temporal_address, queue, spec, count=2) as pool:
            handle = start_run(temporal_address, queue, "kill-map", session, root, "go")
            deadline = time.monotonic() + 60
            wanted = 3 + rng.randint(0, 6)
            while time.monotonic() < deadline and (
                not calls.exists()
                or len([c for c in calls.read_text().split() if c.startswith("each")]) < wanted
            ):
                time.sleep(0.05)
            pool.kill(pool.running[rng.randrange(2)])
            done_before = completed_items(root, session)
            mid_map += 0 < len(done_before) < len(items)
            summary = anyio.run(handle.result)
        assert summary["status"] == "completed", summary
        runs = Counter(calls.read_text().split())
        assert set(runs) == {"split", "total", *items}
        for item in done_before:
            assert runs[item] == 1, f"round {round_number}: {item} had completed but ran {runs[item]} times"
        assert all(count <= 2 for count in runs.values()), runs
        doc = anyio.run(Journal(LocalFileStorage(root), ScopeLayout(session, "multiAgent", "kill-map")).load)
        outputs = doc.fields["node/each"]["result"]["output"]
        missing = [i for i in range(16) if 2 * i not in outputs]
        assert not missing, f"round {round_number}: the map's result lacks items {missing}: {outputs}"
        assert doc.fields["node/total"]["result"]["output"] == sum(2 * i for i in range(16))
    assert mid_map >= 1, "a kill should land while some items had completed and others had not"
