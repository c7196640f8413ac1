"""Kill tests: a run SIGKILLed at a random moment resumes to the result of an uninterrupted run.

Every node (graph) or turn (swarm) that had completed before the kill runs exactly once in total; the
one(s) in flight at most twice. 20 rounds each in CI on local files and 4 on SQLite and on PostgreSQL;
``ORCHESTRA_STRESS=1`` runs 100 (and 20), and ``ORCHESTRA_KILL_ROUNDS=N`` any number.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import storage_from_uri

ROUNDS = int(os.environ.get("ORCHESTRA_KILL_ROUNDS", "100" if os.environ.get("ORCHESTRA_STRESS") else "20"))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
RUN_SECONDS = {"graph": 0.3, "swarm": 0.6}  # about how long a run takes here, once the child is ready


def spawn(kind, root, session, calls):
    return subprocess.Popen(
        [sys.executable, "-m", "tests.kill_pipelines", kind, str(root), session, str(calls)],
        stdout=subprocess.PIPE,
        env=ENV,
        cwd=Path(__file__).parent.parent.parent,
    )


def run_to_end(kind, root, session, calls):
    child = spawn(kind, root, session, calls)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0
    return json.loads(out.decode().strip().splitlines()[-1])


def calls_of(path):
    return Counter(path.read_text().split()) if path.exists() else Counter()


def persisted(root, session, scope):
    return anyio.run(Journal(storage_from_uri(str(root)), ScopeLayout(session, "multiAgent", scope)).load)


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    """The results of uninterrupted runs."""
    root = tmp_path_factory.mktemp("reference")
    return {
        kind: run_to_end(kind, root / kind, "reference", root / f"{kind}.calls")
        for kind in ("graph", "swarm")
    }


@pytest.mark.parametrize("backend", ["files", "sqlite", "postgres"])
@pytest.mark.parametrize("kind", ["graph", "swarm"])
def test_killed_runs_resume_to_the_uninterrupted_result(kind, backend, tmp_path, expected, request):
    rng = random.Random(f"kill-{kind}")
    reference = expected[kind]
    assert reference["status"] == "completed"
    where = {"files": tmp_path, "sqlite": f"sqlite:{tmp_path}/runs.db"}.get(backend)
    if backend == "postgres":
        where = request.getfixturevalue("postgres_uri")
    rounds = ROUNDS if backend == "files" else max(2, ROUNDS // 5)
    killed_mid_run = 0
    for round_number in range(rounds):
        session = f"{kind}-{round_number}"
        calls = tmp_path / f"{session}.calls"
        child = spawn(kind, where, session, calls)
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, RUN_SECONDS[kind]))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()

        doc = persisted(where, session, f"kill-{kind}")
        before = calls_of(calls)
        if kind == "graph":
            done_before = {
                name[len("node/") :]
                for name, record in (doc.fields.items() if doc else [])
                if name.startswith("node/") and record["status"] == "completed"
            }
        else:
            history = doc.logs.get("node_history", []) if doc else []
            done_before = {f"{name}:{turn}" for turn, name in enumerate(history)}
        finished_before_kill = doc is not None and doc.fields["run"]["status"] == "completed"
        final = run_to_end(kind, where, session, calls)
        after = calls_of(calls)
        assert final == reference, f"round {round_number}: the resumed result differs"
        if finished_before_kill:
            continue  # the kill came too late: the second invocation was a fresh run, as it should be
        killed_mid_run += 1
        for name in done_before:
            assert after[name] == 1, (
                f"round {round_number}: {name} completed before the kill but ran {after[name]} times"
            )
        for name, count in after.items():
            assert count <= 2, f"round {round_number}: {name} ran {count} times"
            if count == 2:
                assert name not in done_before
                assert before[name] >= 1
    assert killed_mid_run >= rounds // 2, "most kills should land while the run is in progress"
