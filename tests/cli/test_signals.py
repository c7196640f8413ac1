"""End to end: `orchestra run` in a subprocess, SIGINT (or SIGTERM) mid-run, then `orchestra resume`
completes it, and no node that had completed runs twice."""

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

from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import LocalFileStorage
from tests.cli.pipelines import CHAIN

ROOT = Path(__file__).parent.parent.parent


def orchestra(*args, env):
    return subprocess.Popen(
        [sys.executable, "-c", "from orchestra.cli import main; main()", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=env["WORKDIR"],
    )


def show_session(session_id, env):
    return subprocess.run(
        [sys.executable, "-c", "from orchestra.cli import main; main()", "sessions", "show", session_id],
        capture_output=True,
        text=True,
        env=env,
        cwd=env["WORKDIR"],
        timeout=60,
    )


def completed_nodes(workdir, session):
    storage = LocalFileStorage(workdir / ".orchestra")
    doc = anyio.run(Journal(storage, ScopeLayout(session, "multiAgent", "chain")).load)
    if doc is None:
        return set(), None
    done = {
        n[len("node/") :]
        for n, r in doc.fields.items()
        if n.startswith("node/") and r["status"] == "completed"
    }
    return done, doc.fields["run"]["status"]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_the_run_and_resume_finishes_it(tmp_path, signum, code):
    calls = tmp_path / "calls"
    spec = tmp_path / "chain.yaml"
    spec.write_text(CHAIN)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
        "ORCHESTRA_TEST_CALLS": str(calls),
        "ORCHESTRA_TEST_STEP_SECONDS": "0.25",
        "WORKDIR": str(tmp_path),
    }
    child = orchestra("run", spec, "--session-id", "sig", env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until at least two nodes completed
        if calls.exists() and len(calls.read_text().split()) >= 3:
            break
        time.sleep(0.05)
    child.send_signal(signum)
    out, err = child.communicate(timeout=30)
    assert child.returncode == code, err.decode()
    stderr = err.decode()
    assert "the run was saved as interrupted" in stderr
    assert f"orchestra resume {spec} --session-id sig" in stderr

    done_before, status = completed_nodes(tmp_path, "sig")
    assert status == "interrupted"
    assert 2 <= len(done_before) < 6

    resumed = orchestra("resume", spec, "--session-id", "sig", "--json", env=env)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err.decode()
    result = json.loads(out)
    assert result["status"] == "completed"
    assert result["output"] == "s6 done"
    runs = Counter(calls.read_text().split())
    assert set(runs) == {f"s{i}" for i in range(1, 7)}
    for node in done_before:
        assert runs[node] == 1, f"{node} completed before the signal but ran {runs[node]} times"
    assert all(count <= 2 for count in runs.values())


def test_a_second_run_of_a_live_session_is_refused_before_any_work_and_a_killed_one_shows(tmp_path):
    calls = tmp_path / "calls"
    spec = tmp_path / "chain.yaml"
    spec.write_text(CHAIN)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
        "ORCHESTRA_TEST_CALLS": str(calls),
        "ORCHESTRA_TEST_STEP_SECONDS": "2.5",  # 15 s in all: room for slow process starts
        "WORKDIR": str(tmp_path),
    }
    first = orchestra("run", spec, "--session-id", "live", env=env)
    deadline = time.monotonic() + 30
    while not (calls.exists() and len(calls.read_text().split()) >= 2) and time.monotonic() < deadline:
        time.sleep(0.05)  # the first node is saved, the second is running
    second = orchestra("resume", spec, "--session-id", "live", env=env)
    _, second_err = second.communicate(timeout=60)
    assert second.returncode == 1, second_err.decode()
    assert b"is being run by process" in second_err
    assert b"Traceback" not in second_err
    live = show_session("live", env)
    assert "executing (process" in live.stdout, live.stdout

    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    shown = show_session("live", env)
    assert "interrupted? (no live writer since" in shown.stdout, shown.stdout
    assert "executing" not in shown.stdout
    env["ORCHESTRA_TEST_STEP_SECONDS"] = "0"
    resumed = orchestra("resume", spec, "--session-id", "live", env=env)
    resumed.communicate(timeout=60)
    assert resumed.returncode == 0
    runs = Counter(calls.read_text().split())
    assert set(runs) == {"s1", "s2", "s3", "s4", "s5", "s6"}
    assert max(runs.values()) <= 2  # only the node running at the kill ran again
