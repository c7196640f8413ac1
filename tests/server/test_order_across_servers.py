"""A session's runs across ``orchestra serve`` processes on one storage (local files, SQLite, PostgreSQL):
a background run is started once: a live server never takes a run over from itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import httpx
import pytest

from tests.server.conftest import auth, write_platform_config
from tests.server.test_platform_processes import Servers, final_record, read_events

COUNTED = """version: 1
kind: agent
id: counted
agents:
  - name: counted
    model: function:tests.server.agents:counted_echo
    conversation_manager: {type: none}
"""


def counted_config(root: Path, storage: str, runs: str) -> Path:
    """The platform's config with the ``counted`` agent (its model calls written to a file), set to
    ``on_busy: enqueue``."""
    config = write_platform_config(root, storage, runs)
    (root / "counted.yaml").write_text(COUNTED)
    hosted = "  - {id: counted, spec: counted.yaml, workspace: acme, on_busy: enqueue}\n"
    config.write_text(config.read_text().replace("  - {id: other,", hosted + "  - {id: other,"))
    return config


@pytest.fixture(params=["file", "sqlite", "postgres"])
def storage_uri(request, tmp_path) -> str:
    if request.param == "file":
        return f"file:{tmp_path}/store"
    if request.param == "sqlite":
        return f"sqlite:{tmp_path}/store.db"
    return f"'{request.getfixturevalue('postgres_uri')}'"


@pytest.fixture
def servers():
    made: list[Servers] = []

    def make(config: Path, **env: str) -> Servers:
        made.append(Servers(config, env))
        return made[-1]

    yield make
    for group in made:
        group.close()


def calls_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"
BACKGROUND_RUNS = 200 if STRESS else 60


def test_a_live_server_starts_each_background_run_once(tmp_path, servers, postgres_uri):
    # A fast sweep on PostgreSQL: a server's sweep used to find a run its start had not yet put into the
    # session's busy document, queue it again and start it a second time ("attempt 2" from the same
    # server, its model run twice) while the first start ran it.
    calls = tmp_path / "calls.txt"
    runs = "runs: {heartbeat_s: 0.2, server_gone_after_s: 10, poll_s: 0.05, sweep_s: 0.01}\n"
    group = servers(counted_config(tmp_path, f"'{postgres_uri}'", runs), ORCHESTRA_TEST_CALLS=str(calls))
    url = group.start()
    started: list[str] = []

    async def start_all() -> None:
        # A few clients, each starting runs one after another: few runs are active at a time, so the
        # sweep goes over them often.
        async with httpx.AsyncClient(headers=auth(), timeout=120) as http:

            async def client(first: int) -> None:
                for index in range(first, BACKGROUND_RUNS, 4):
                    body = {"input": f"b{index}", "session_id": f"bg{index}"}
                    answer = await http.post(f"{url}/api/v1/agents/counted/runs", json=body)
                    assert answer.status_code == 202, answer.text
                    started.append(answer.json()["run_id"])

            async with anyio.create_task_group() as tasks:
                for first in range(4):
                    tasks.start_soon(client, first)

    anyio.run(start_all)
    for run_id in started:
        record = final_record(url, run_id)
        assert (record["status"], record["attempt"]) == ("completed", 1), record
        starts = [
            e["data"]
            for e in read_events(url, run_id)
            if e["event"] == "status" and e["data"]["status"] == "executing"
        ]
        assert [s.get("attempt") for s in starts] == [1], (run_id, starts)
    assert sorted(calls_of(calls)) == sorted(f"b{i}" for i in range(BACKGROUND_RUNS))  # each model call once
