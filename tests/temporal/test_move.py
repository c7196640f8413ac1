"""A run moves between backends on the same storage (issue 39 item 3): a local run SIGKILLed half way
is resumed on Temporal (``orchestra resume --on``), and a Temporal run whose workflow was stopped half way
is resumed locally. Both complete, and every node that had completed before the move ran once (counted
by its side effect)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from orchestra.session.admin import load_scope
from orchestra.spec import build, parse_text
from orchestra.storage import storage_from_uri

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).parent.parent.parent
NODES = [f"m{i}" for i in range(6)]
SPEC = (
    "version: 1\nkind: graph\nid: moving\nnodes:\n"
    + "".join(f"  - {{id: {n}, function: 'tests.temporal.long_steps:slow_mark'}}\n" for n in NODES)
    + "edges:\n"
    + "".join(f"  - {{from: {a}, to: {b}}}\n" for a, b in itertools.pairwise(NODES))
)


def ran(calls: Path) -> Counter[str]:
    return Counter(calls.read_text().split()) if calls.exists() else Counter()


async def saved(storage: str) -> dict:
    return await load_scope(storage_from_uri(storage), "s1", "multiAgent", "moving")


async def resume_on_temporal(address: str, loaded, storage: str) -> dict:
    from orchestra import temporal

    target = temporal.TemporalTarget(address, "default", "q-move")
    client = await temporal.connect(target)
    request = temporal.RunRequest(spec_id="moving", session_id="s1", storage=storage, resume=True)
    async with temporal.create_worker(client, target.task_queue, [loaded]):
        handle = await temporal.start_run(client, target, request)
        return await handle.result()


async def test_a_stopped_temporal_run_completes_locally(temporal_address, tmp_path, monkeypatch):
    from orchestra import temporal

    calls = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.15")
    loaded = parse_text(SPEC, "moving.yaml")
    storage = f"file:{tmp_path}/store"
    target = temporal.TemporalTarget(temporal_address, "default", "q-move-back")
    client = await temporal.connect(target)
    request = temporal.RunRequest(spec_id="moving", session_id="s1", storage=storage, task="go", run_id="r1")
    async with temporal.create_worker(client, target.task_queue, [loaded]):
        handle = await temporal.start_run(client, target, request)
        # The run's progress is in another component (the workflow): ask the session until it shows it.
        with anyio.fail_after(120):  # a bound, not a measure: a run that never gets there fails the test
            while len([n for n, r in (await saved_or_empty(storage)).items() if r == "completed"]) < 3:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        await handle.terminate("moved to a local run")
    before = ran(calls)
    assert 0 < len(before) < len(NODES)
    graph = build(loaded, session_id="s1", storage=storage)
    result = await graph.invoke_async(None)
    assert result.status.value == "completed", result.reason
    after = ran(calls)
    assert set(after) == set(NODES)
    done_before = [n for n in before if n != max(before)]
    assert all(after[n] == 1 for n in done_before), after
    assert all(after[n] <= 2 for n in NODES), after
    assert result.output == f"{NODES[-1]} done"


async def saved_or_empty(storage: str) -> dict[str, str]:
    """Each node's status as committed so far (nothing before the first commit)."""
    try:
        doc = await saved(storage)
    except Exception:
        return {}
    return {n[len("node/") :]: r.get("status") for n, r in doc.fields.items() if n.startswith("node/")}


def test_the_cli_resumes_a_killed_local_run_on_temporal(temporal_address, tmp_path, monkeypatch):
    """``orchestra resume --on temporal://...`` of a run SIGKILLed locally: it completes on a worker, and
    no node that had completed ran again."""
    from tests.temporal.conftest import workers

    calls = tmp_path / "calls"
    spec = tmp_path / "moving.yaml"
    spec.write_text(SPEC)
    storage = f"file:{tmp_path}/store"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
        "ORCHESTRA_TEST_CALLS": str(calls),
        "ORCHESTRA_TEST_STEP_SECONDS": "0.15",
    }
    cli = [sys.executable, "-c", "from orchestra.cli import main; main()"]
    where = ["--session-id", "s1", "--storage", storage, "--json"]
    local = subprocess.Popen(
        [*cli, "run", str(spec), "--input", "go", *where], env=env, stdout=subprocess.DEVNULL
    )
    while sum(ran(calls).values()) < 3 and local.poll() is None:
        time.sleep(0.05)
    local.send_signal(signal.SIGKILL)
    local.wait()
    before = ran(calls)
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))  # the worker process inherits them
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.15")
    with workers(temporal_address, "q-move-cli", spec):
        on = f"temporal://{temporal_address}/default?task_queue=q-move-cli"
        resumed = subprocess.run(
            [*cli, "resume", str(spec), *where, "--on", on], env=env, capture_output=True, timeout=240
        )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert json.loads(resumed.stdout)["status"] == "completed"
    after = ran(calls)
    assert set(after) == set(NODES)
    assert all(after[n] == 1 for n in before if n != max(before)), after


# An agent node between two function nodes; its three sends go through the effect service, which counts
# them by Idempotency-Key: a turn that started again would send ``a`` and ``b`` again under new keys.
TURN_SPEC = """version: 1
kind: graph
id: moving-turn
agents:
  - {name: sender, model: 'function:tests.support:effect_planner', tools: ['tests.support:send_effect']}
nodes:
  - {id: first, function: 'tests.temporal.long_steps:slow_mark'}
  - {id: sender, agent: sender}
  - {id: last, function: 'tests.temporal.long_steps:slow_mark'}
edges:
  - {from: first, to: sender}
  - {from: sender, to: last}
"""


# The same agent as a swarm's only agent (a swarm's turns are agent nodes too).
TURN_SWARM = """version: 1
kind: swarm
id: moving-turn
entry_point: sender
agents:
  - {name: sender, model: 'function:tests.support:effect_planner', tools: ['tests.support:send_effect']}
"""


@pytest.mark.parametrize(
    ("text", "nodes"), [(TURN_SPEC, {"first": 1, "last": 1}), (TURN_SWARM, {})], ids=["graph", "swarm"]
)
def test_a_killed_local_runs_open_turn_resumes_on_temporal(
    temporal_address, tmp_path, monkeypatch, text, nodes
):
    """A local run SIGKILLed while its agent node's side-effecting tools ran (its turn checkpointed open in
    the session) is resumed with ``orchestra resume --on``: the worker resumes the open turn, so each
    effect happened once, and the node before it ran once."""
    from tests.effects_service import EffectService
    from tests.temporal.conftest import workers

    calls = tmp_path / "calls"
    spec = tmp_path / "turn.yaml"
    spec.write_text(text)
    storage = f"file:{tmp_path}/store"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))  # the processes inherit them
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.4")
    cli = [sys.executable, "-c", "from orchestra.cli import main; main()"]
    where = ["--session-id", "s1", "--storage", storage, "--json"]
    with EffectService() as service:
        monkeypatch.setenv("ORCHESTRA_TEST_EFFECTS_URL", service.url)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        local = subprocess.Popen(
            [*cli, "run", str(spec), "--input", "send them", *where], env=env, stdout=subprocess.DEVNULL
        )
        while sum(service.effects.values()) < 1 and local.poll() is None:
            time.sleep(0.02)
        local.send_signal(signal.SIGKILL)  # in the middle of the first sends (each takes 0.4 s)
        local.wait()
        assert sum(service.effects.values()) in (1, 2)
        with workers(temporal_address, "q-move-turn", spec):
            on = f"temporal://{temporal_address}/default?task_queue=q-move-turn"
            resumed = subprocess.run(
                [*cli, "resume", str(spec), *where, "--on", on], env=env, capture_output=True, timeout=240
            )
        assert resumed.returncode == 0, resumed.stderr.decode()
        assert json.loads(resumed.stdout)["status"] == "completed"
        assert dict(service.effects) == {"a": 1, "b": 1, "c": 1}
    assert ran(calls) == Counter(nodes)


@pytest.mark.parametrize(
    ("text", "nodes"), [(TURN_SPEC, {"first": 1, "last": 1}), (TURN_SWARM, {})], ids=["graph", "swarm"]
)
def test_a_stopped_workers_open_turn_resumes_locally(temporal_address, tmp_path, monkeypatch, text, nodes):
    """A Temporal run whose worker is SIGKILLed while its agent node's side-effecting tools ran (the turn
    checkpointed open in the run's turn blob), then terminated, is resumed with ``orchestra resume``: the
    local run resumes the open turn (each effect once), completes, and the blob is cleaned up."""
    from tests.effects_service import EffectService
    from tests.temporal.conftest import workers
    from tests.temporal.test_kill import start_run

    calls = tmp_path / "calls"
    spec = tmp_path / "turn.yaml"
    spec.write_text(text)
    root = tmp_path / "store"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))  # the processes inherit them
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.4")
    cli = [sys.executable, "-c", "from orchestra.cli import main; main()"]
    with EffectService() as service:
        monkeypatch.setenv("ORCHESTRA_TEST_EFFECTS_URL", service.url)
        with workers(temporal_address, "q-move-turn-back", spec) as pool:
            handle = start_run(temporal_address, "q-move-turn-back", "moving-turn", "s1", root, "send them")
            while sum(service.effects.values()) < 1 and pool.running[0].poll() is None:
                time.sleep(0.02)
            pool.kill()  # in the middle of the first sends (each takes 0.4 s)
        anyio.run(handle.terminate, "moved to a local run")
        assert sum(service.effects.values()) in (1, 2)
        assert list(root.rglob("*-turn.json")), "the worker checkpointed no open turn"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        where = ["--session-id", "s1", "--storage", f"file:{root}", "--json"]
        resumed = subprocess.run(
            [*cli, "resume", str(spec), *where], env=env, capture_output=True, timeout=240
        )
        assert resumed.returncode == 0, resumed.stderr.decode()
        assert json.loads(resumed.stdout)["status"] == "completed"
        assert dict(service.effects) == {"a": 1, "b": 1, "c": 1}
    assert ran(calls) == Counter(nodes)
    assert not list(root.rglob("*-turn.json"))
