"""Kill tests for fan-out, retries and budgets: a run SIGKILLed at a random moment resumes, and what had
completed before the kill never runs again.

- map: an item whose result was saved never runs again; one in flight at most twice.
- retry: a failed attempt that was recorded never runs again (the resumed node goes on with the next
  attempt, and ``max_attempts`` counts across the kill).
- budget: what the run spent is counted across the kill; resumed with the same budget it stops where an
  uninterrupted run stops, and resumed with a larger one it completes.

6 rounds each in CI (4 for budgets, whose rounds run the pipeline three times); ``ORCHESTRA_STRESS=1`` runs 40, ``ORCHESTRA_KILL_ROUNDS=N`` any number.
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
from orchestra.storage import LocalFileStorage
from tests.kill_pipelines import BUDGET_CHAIN, MAP_ITEMS, RETRY_CHAIN

ROUNDS = int(os.environ.get("ORCHESTRA_KILL_ROUNDS", "40" if os.environ.get("ORCHESTRA_STRESS") else "6"))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
RUN_SECONDS = {"map": 0.8, "retry": 1.2, "budget": 0.6}  # about how long a run takes here once ready
pytestmark = pytest.mark.slow


def spawn(kind, root, session, calls, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.kill_pipelines",
            kind,
            str(root),
            session,
            str(calls),
            *map(str, extra),
        ],
        stdout=subprocess.PIPE,
        env=ENV,
        cwd=Path(__file__).parent.parent.parent,
    )


def run_to_end(kind, root, session, calls, *extra):
    child = spawn(kind, root, session, calls, *extra)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0
    return json.loads(out.decode().strip().splitlines()[-1])


def kill_mid_run(kind, root, session, calls, rng, *extra):
    child = spawn(kind, root, session, calls, *extra)
    assert child.stdout.readline().strip() == b"ready"
    time.sleep(rng.uniform(0.0, RUN_SECONDS[kind]))
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()


def calls_of(path):
    return Counter(path.read_text().split()) if path.exists() else Counter()


def persisted(root, session, scope):
    return anyio.run(Journal(LocalFileStorage(root), ScopeLayout(session, "multiAgent", scope)).load)


def test_a_killed_fan_out_runs_only_the_missing_items(tmp_path):
    rng = random.Random("kill-map")
    reference = run_to_end("map", tmp_path / "ref", "reference", tmp_path / "ref.calls")
    assert reference["status"] == "completed"
    items = {f"each[{i}]" for i in range(MAP_ITEMS)}
    mid_map = 0
    for round_number in range(ROUNDS):
        session, calls = f"map-{round_number}", tmp_path / f"map-{round_number}.calls"
        kill_mid_run("map", tmp_path, session, calls, rng)
        doc = persisted(tmp_path, session, "kill-map")
        fields = doc.fields if doc else {}
        saved = {
            f"each[{name.rsplit('/', 1)[1]}]"
            for name, record in fields.items()
            if name.startswith("map/each/item/") and record.get("status") == "completed"
        }
        if (fields.get("node/each") or {}).get("status") == "completed":
            saved = set(items)
        mid_map += 0 < len(saved) < len(items)
        before = calls_of(calls)
        final = run_to_end("map", tmp_path, session, calls)
        after = calls_of(calls)
        assert final == reference, f"round {round_number}: the resumed result differs"
        if (fields.get("run") or {}).get("status") == "completed":
            continue  # the kill came too late: the second invocation was a fresh run, as it should be
        assert set(after) == items
        for item in saved:
            assert after[item] == 1, f"round {round_number}: {item} was saved but ran {after[item]} times"
        for item, count in after.items():
            assert count <= 2, f"round {round_number}: {item} ran {count} times"
            if count == 2:
                assert before[item] == 1
                assert item not in saved
    assert mid_map >= 1, "a kill should land while some items were saved and others were not"


def test_a_killed_retrying_node_goes_on_with_its_next_attempt(tmp_path):
    rng = random.Random("kill-retry")
    reference = run_to_end("retry", tmp_path / "ref", "reference", tmp_path / "ref.calls")
    assert reference["status"] == "completed"
    expected = {f"{name}:{attempt}" for name in RETRY_CHAIN for attempt in (1, 2, 3)}
    mid_retries = 0
    for round_number in range(ROUNDS):
        session, calls = f"retry-{round_number}", tmp_path / f"retry-{round_number}.calls"
        kill_mid_run("retry", tmp_path, session, calls, rng)
        doc = persisted(tmp_path, session, "kill-retry")
        recorded = set()
        for name, record in doc.fields.items() if doc else []:
            if name.startswith("node/"):
                node = name[len("node/") :]
                recorded |= {f"{node}:{a['attempt']}" for a in record.get("attempts") or []}
                if record["status"] == "completed":
                    recorded |= {f"{node}:{a}" for a in (1, 2, 3)}
        mid_retries += 0 < len(recorded) < len(expected)
        final = run_to_end("retry", tmp_path, session, calls)
        after = calls_of(calls)
        assert final == reference, f"round {round_number}: the resumed result differs"
        if doc is not None and doc.fields["run"]["status"] == "completed":
            continue  # the kill came too late: the second invocation was a fresh run
        assert set(after) == expected  # never a fourth attempt: max_attempts counts across the kill
        for attempt in recorded:
            assert after[attempt] == 1, (
                f"round {round_number}: {attempt} was recorded but ran {after[attempt]} times"
            )
        assert all(count <= 2 for count in after.values()), after
    assert mid_retries >= 1


def test_a_budget_counts_across_a_kill_and_a_resume(tmp_path):
    rng = random.Random("kill-budget")
    reference = run_to_end("budget", tmp_path / "ref", "reference", tmp_path / "ref.calls", 12)
    assert reference["status"] == "interrupted"
    assert reference["reason"].startswith("BudgetExceeded: ")
    assert reference["spent"]["model_calls"] == 12
    for round_number in range(max(3, ROUNDS * 2 // 3)):
        session, calls = f"budget-{round_number}", tmp_path / f"budget-{round_number}.calls"
        kill_mid_run("budget", tmp_path, session, calls, rng, 12)
        stopped = run_to_end("budget", tmp_path, session, calls, 12)
        made = sum(calls_of(calls).values())
        # Spending is saved after each model call: at most the one call in flight at the kill is lost.
        assert stopped["status"] == "interrupted", f"round {round_number}: {stopped}"
        assert stopped["reason"].startswith(
            "BudgetExceeded: run of graph 'kill-budget' spent its model_calls"
        )
        assert stopped["spent"]["model_calls"] == 12
        assert 12 <= made <= 13, f"round {round_number}: {made} model calls for a budget of 12"
        if round_number == 0:  # resumed with the same budget again: nothing more runs
            again = run_to_end("budget", tmp_path, session, calls, 12)
            assert again["status"] == "interrupted"
            assert sum(calls_of(calls).values()) == made
        done = run_to_end("budget", tmp_path, session, calls, 40)  # a larger budget: the rest runs
        total = sum(calls_of(calls).values())
        assert done["status"] == "completed", done
        assert len(BUDGET_CHAIN) <= total <= len(BUDGET_CHAIN) + 1
        assert total - 1 <= done["spent"]["model_calls"] <= total
