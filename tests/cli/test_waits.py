"""``orchestra run`` / ``resume`` with durable waits: a short wait is waited here; a long one exits 5 with
the command that wakes it, which, once the (test) clock passed, finishes the run; completed nodes do not
run again."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orchestra.cli import app
from tests.server.wait_steps import calls

runner = CliRunner()

PIPELINE = """version: 1
kind: graph
id: napper
nodes:
  - {{id: before, function: 'tests.server.wait_steps:before'}}
  - {{id: nap, wait: {{for: {duration}}}}}
  - {{id: middle, function: 'tests.server.wait_steps:middle'}}
edges:
  - {{from: before, to: nap}}
  - {{from: nap, to: middle}}
"""


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(tmp_path / "calls"))
    clock = tmp_path / "clock"
    clock.write_text("0")
    monkeypatch.setenv("ORCHESTRA_TEST_CLOCK", str(clock))
    return tmp_path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_a_long_wait_exits_5_and_resume_finishes_it_once_the_clock_passed(workdir):
    path = workdir / "napper.yaml"
    path.write_text(PIPELINE.format(duration="1h"))
    result = invoke("run", path, "--input", "go", "--session-id", "n1")
    assert result.exit_code == 5, result.output
    assert "waiting" in result.stderr
    assert "a timer until" in result.stderr
    assert f"Wake it once due with: orchestra resume {path} --session-id n1" in result.stderr

    early = invoke("resume", path, "--session-id", "n1")  # not due: it waits on, nothing ran
    assert early.exit_code == 5, early.output
    assert calls(workdir / "calls") == ["before"]

    (workdir / "clock").write_text("3601")
    woken = invoke("resume", path, "--session-id", "n1")
    assert woken.exit_code == 0, woken.output
    assert woken.stdout.strip() == "slept"
    assert calls(workdir / "calls") == ["before", "middle"]


def test_a_short_wait_is_waited_in_the_process(workdir, monkeypatch):
    path = workdir / "napper.yaml"
    path.write_text(PIPELINE.format(duration="1s"))
    result = invoke("run", path, "--input", "go", "--session-id", "n2")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "slept"
    monkeypatch.setenv("ORCHESTRA_WAIT_HERE_S", "0")  # the threshold: nothing is waited here
    assert invoke("run", path, "--input", "go", "--session-id", "n3").exit_code == 5
