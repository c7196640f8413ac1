"""The protocol doors follow the server's second-message policy (``runs.on_busy``, ``enqueue`` by default):
a second AG-UI run on a thread whose first run is still going waits for it and runs after it, as a second
``POST .../invoke`` does, instead of being refused."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.server.conftest import Server, counted_config
from tests.server.protocols.test_agui import run, run_input

pytestmark = pytest.mark.timeout(120)


def counted_server(root: Path) -> Server:
    """The platform's config and the ``counted`` agent, which names no policy: the server's applies."""
    return Server(counted_config(root, f"file:{root}/store"))


def test_a_second_ag_ui_run_on_a_busy_thread_waits_and_runs_after_the_first(tmp_path, monkeypatch):
    calls, gate = tmp_path / "calls.txt", tmp_path / "gate"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(calls))
    monkeypatch.setenv("ORCHESTRA_TEST_GATE", str(gate))
    thread_id = "thread-double-text"
    events: dict[str, list] = {}

    def send(text: str) -> None:
        events[text] = run(server, "counted", run_input(text, thread_id=thread_id))

    with counted_server(tmp_path) as server:
        first = threading.Thread(target=send, args=("slow x1",))
        first.start()
        deadline = time.monotonic() + 60
        while not (calls.exists() and "slow x1" in calls.read_text()):  # x1's model runs, held by the gate
            assert time.monotonic() < deadline, "x1's model never started"
            time.sleep(0.02)
        second = threading.Thread(target=send, args=("x2",))
        second.start()
        second.join(1.0)  # x2 waits in line for x1 (refused, it would have ended already)
        gate.touch()
        first.join(60)
        second.join(60)

    finished = {text: [e.type.value for e in evs][-1] for text, evs in events.items()}
    assert finished == {"slow x1": "RUN_FINISHED", "x2": "RUN_FINISHED"}, events
    assert calls.read_text().splitlines() == ["slow x1", "x2"]  # in order of arrival, each model ran once
    replies = {
        text: "".join(e.delta for e in evs if e.type.value == "TEXT_MESSAGE_CONTENT")
        for text, evs in events.items()
    }
    assert replies == {"slow x1": "echo: slow x1 (turn 1)", "x2": "echo: x2 (turn 2)"}
