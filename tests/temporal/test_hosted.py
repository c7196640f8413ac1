"""A hosted pipeline's runs on Temporal workers (issue 39 item 3): ``orchestra serve`` with ``temporal:``
sends a pipeline's runs to an ``orchestra worker`` process on the same storage, and answers, records and
streams them as local runs; a run of a killed server moves to the workers (``POST /runs/{id}/move``) and
its completed nodes never run again. Every node records which process ran it."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from orchestra.errors import ConfigurationError
from orchestra.server import hash_key, load_config
from orchestra.session.admin import load_scope
from orchestra.storage import storage_from_uri
from tests.server.conftest import Server
from tests.server.test_concurrency import free_port, start_server
from tests.temporal.conftest import workers

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).parent.parent.parent
KEY = "acme-secret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
NODES = [f"n{i}" for i in range(4)]
SPEC = (
    "version: 1\nkind: graph\nid: hosted\nnodes:\n"
    + "".join(f"  - {{id: {n}, function: 'tests.temporal.hosted_steps:mark'}}\n" for n in NODES)
    + "edges:\n"
    + "".join(f"  - {{from: {a}, to: {b}}}\n" for a, b in itertools.pairwise(NODES))
)


APPROVAL = """version: 1
kind: graph
id: approval
nodes:
  - {id: draft, function: 'tests.temporal.hosted_steps:mark'}
  - {id: approve, function: 'tests.support:ask_human'}
edges:
  - {from: draft, to: approve}
"""


LONG_NODES = [f"l{i}" for i in range(6)]
LONG = (
    "version: 1\nkind: graph\nid: long\nnodes:\n"
    + "".join(f"  - {{id: {n}, function: 'tests.temporal.hosted_steps:mark'}}\n" for n in LONG_NODES)
    + "edges:\n"
    + "".join(f"  - {{from: {a}, to: {b}}}\n" for a, b in itertools.pairwise(LONG_NODES))
)


def write_config(root: Path, storage: str, temporal: str | None, extra: str = "", more: str = "") -> Path:
    (root / "hosted.yaml").write_text(SPEC)
    (root / "approval.yaml").write_text(APPROVAL)
    (root / "long.yaml").write_text(LONG)
    (root / "chat.yaml").write_text(
        "version: 1\nkind: agent\nid: chat\nagents:\n  - {name: chat, model: 'function:tests.support:echo_reply'}\n"
    )
    config = root / "server.yaml"
    config.write_text(
        f"version: 1\nstorage: {storage}\n"
        + (f"temporal: '{temporal}'\n" if temporal else "")
        + "agents:\n  - {id: pipe, spec: hosted.yaml, workspace: acme"
        + extra
        + "}\n  - {id: chat, spec: chat.yaml, workspace: acme}\n"
        + "  - {id: approval, spec: approval.yaml, workspace: acme}\n"
        + more
        + f"api_keys:\n  - {{workspace: acme, sha256: {hash_key(KEY)}}}\n"
        + "runs: {heartbeat_s: 0.2, server_gone_after_s: 2, sweep_s: 0.3, max_attempts: 1}\n"
    )
    return config


def ran(calls: Path) -> Counter[str]:
    """``<node>@<pid>`` lines, counted."""
    return Counter(calls.read_text().split()) if calls.exists() else Counter()


def nodes_by(calls: Path) -> dict[str, list[int]]:
    """Each node's runs, as the pids of the processes that ran them."""
    runs: dict[str, list[int]] = {}
    for line in calls.read_text().split() if calls.exists() else []:
        node, pid = line.split("@")
        runs.setdefault(node, []).append(int(pid))
    return runs


def completed_in_session(storage: str, session_id: str, scope: str = "hosted") -> list[str]:
    async def read() -> list[str]:
        try:
            doc = await load_scope(storage_from_uri(storage), session_id, "multiAgent", scope)
        except Exception:  # not committed yet
            return []
        return [
            n[len("node/") :]
            for n, r in doc.fields.items()
            if n.startswith("node/") and (r.get("result") or {}).get("status") == "completed"
        ]

    return anyio.run(read)


def wait_completed(
    storage: str,
    session_id: str,
    scope: str = "hosted",
    *,
    count: int = 1,
    alive: subprocess.Popen | None = None,
) -> list[str]:
    """The session's completed nodes once there are ``count`` (asked a bounded number of times: a run that
    never gets there fails the test instead of hanging it); ``alive``: a process that must not exit first."""
    for _ in range(1200):
        done = completed_in_session(storage, session_id, scope)
        if len(done) >= count:
            return done
        assert alive is None or alive.poll() is None, f"it exited with {alive.returncode}"
        time.sleep(0.05)
    raise AssertionError(f"session {session_id} never had {count} completed nodes of {scope!r}: {done}")


def final(http: httpx.Client, url: str, run_id: str) -> dict:
    """The run's record once it ended (the run goes on in other processes: asked until it says so)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        record = http.get(f"{url}/api/v1/runs/{run_id}", headers=AUTH).json()
        if record["status"] not in ("queued", "executing"):
            return record
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end: {record}")


async def workflow_status(address: str, workflow_id: str) -> str:
    from orchestra import temporal

    client = await temporal.connect(temporal.TemporalTarget(address, "default", "any"))
    description = await client.get_workflow_handle(workflow_id).describe()
    return description.status.name


@contextlib.contextmanager
def serving(config: Path) -> Iterator[str]:
    """``orchestra serve`` of ``config`` in a process of its own, for the block: its URL."""
    port = free_port()
    server = start_server(config, port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)


@pytest.fixture
def calls(tmp_path, monkeypatch):
    """The file every node records to, in the server's and the worker's process alike."""
    path = tmp_path / "calls"
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(path))
    return path


def test_a_hosted_pipeline_runs_on_the_workers(temporal_address, tmp_path, calls, monkeypatch):
    """Invoked over HTTP, a pipeline of a server with ``temporal:`` runs on the worker, not the server:
    each node once, the answer and the run record as for a local run; a background run's stream has
    its nodes' events and its result; an interrupt is answered over HTTP; a cancelled run's workflow
    is terminated, and its resume completes it on the worker without running a completed node again."""
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.1")
    queue = "q-hosted"
    config = write_config(
        tmp_path,
        f"sqlite:{tmp_path}/server.db",
        f"temporal://{temporal_address}/default?task_queue={queue}",
        more="  - {id: long, spec: long.yaml, workspace: acme}\n",
    )
    specs = (tmp_path / "hosted.yaml", tmp_path / "approval.yaml", tmp_path / "long.yaml")
    with (
        workers(temporal_address, queue, *specs) as pool,
        serving(config) as url,
        httpx.Client(timeout=120) as http,
    ):
        (worker,) = pool.running
        answer = http.post(
            f"{url}/api/v1/agents/pipe/invoke", json={"input": "go", "session_id": "s1"}, headers=AUTH
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["status"] == "completed"
        assert body["output"] == "n3 done"
        record = http.get(f"{url}/api/v1/runs/{body['run_id']}", headers=AUTH).json()
        assert record["status"] == "completed"
        assert record["workflow_id"] == "orchestra/acme/pipe/s1"
        assert {n: r["status"] for n, r in record["nodes"].items()} == dict.fromkeys(NODES, "completed")
        assert nodes_by(calls) == {n: [worker.pid] for n in NODES}

        started = http.post(
            f"{url}/api/v1/agents/pipe/runs", json={"input": "go", "session_id": "s2"}, headers=AUTH
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        events = []
        with http.stream("GET", f"{url}/api/v1/runs/{run_id}/stream", headers=AUTH) as stream:
            name = None
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: ") and name is not None:
                    events.append((name, json.loads(line[len("data: ") :])))
                    if name in ("result", "error"):
                        break
        assert events[-1][0] == "result", events
        assert events[-1][1]["status"] == "completed"
        stops = [data["node_id"] for name, data in events if name == "node_stop"]
        assert stops == NODES, events
        assert [data["output"] for name, data in events if name == "node_stop"] == [
            f"{n} done" for n in NODES
        ]
        assert final(http, url, run_id)["status"] == "completed"

        # A human's answer goes to the workflow that waits for it, which goes on where it stopped.
        asked = http.post(
            f"{url}/api/v1/agents/approval/invoke", json={"input": "go", "session_id": "a1"}, headers=AUTH
        ).json()
        assert asked["status"] == "interrupted", asked
        question = asked["interrupts"][0]
        assert question["reason"] == "ship it?"
        answered = http.post(
            f"{url}/api/v1/agents/approval/invoke",
            json={"session_id": "a1", "responses": [{"interrupt_id": question["id"], "response": "yes"}]},
            headers=AUTH,
        ).json()
        assert answered["status"] == "completed", answered
        assert answered["output"] == "human said yes"

        # A cancel stops the workflow where it is; a resume goes on from the nodes it completed.
        cancelled = http.post(
            f"{url}/api/v1/agents/long/runs", json={"input": "go", "session_id": "c1"}, headers=AUTH
        ).json()["run_id"]
        sessions = f"sqlite:{tmp_path}/server.db?prefix=ws/acme/agents/long"
        wait_completed(sessions, "c1", "long", count=2)
        assert http.post(f"{url}/api/v1/runs/{cancelled}/cancel", headers=AUTH).status_code == 202
        stopped = final(http, url, cancelled)
        assert stopped["status"] == "interrupted", stopped
        assert stopped["stored"] is True  # its completed nodes are kept
        assert anyio.run(workflow_status, temporal_address, "orchestra/acme/long/c1") == "TERMINATED"
        done_before = completed_in_session(sessions, "c1", "long")
        assert len(done_before) < len(LONG_NODES)
        resumed = http.post(f"{url}/api/v1/runs/{cancelled}/resume", headers=AUTH)
        assert resumed.status_code == 202, resumed.text
        record = final(http, url, resumed.json()["run_id"])
        assert record["status"] == "completed", record
        assert record["output"] == "l5 done"
    ran_long = {n: pids for n, pids in nodes_by(calls).items() if n.startswith("l")}
    assert set(ran_long) == set(LONG_NODES)
    assert all(ran_long[n] == [worker.pid] for n in done_before), ran_long  # completed: never again
    assert all(set(pids) == {worker.pid} and len(pids) <= 2 for pids in ran_long.values()), ran_long
    others = {n: pids for n, pids in nodes_by(calls).items() if not n.startswith("l")}
    assert others == {**{n: [worker.pid, worker.pid] for n in NODES}, "draft": [worker.pid]}


def test_two_agents_hosting_one_spec_run_one_session_id_apart(temporal_address, tmp_path, calls, monkeypatch):
    """Sessions are per hosted agent: two agents of one spec file, both on session s1 at once, each get a
    workflow of their own (one per spec and session id would make the second wait for, or answer with,
    the first's run)."""
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.3")
    queue = "q-hosted-twins"
    config = write_config(
        tmp_path,
        f"sqlite:{tmp_path}/server.db",
        f"temporal://{temporal_address}/default?task_queue={queue}",
        more="  - {id: twin, spec: hosted.yaml, workspace: acme}\n",
    )
    with (
        workers(temporal_address, queue, tmp_path / "hosted.yaml") as pool,
        serving(config) as url,
        httpx.Client(timeout=120) as http,
    ):
        (worker,) = pool.running
        started = http.post(
            f"{url}/api/v1/agents/pipe/runs", json={"input": "go", "session_id": "s1"}, headers=AUTH
        )
        assert started.status_code == 202, started.text
        twin = http.post(
            f"{url}/api/v1/agents/twin/invoke", json={"input": "go", "session_id": "s1"}, headers=AUTH
        )
        assert twin.status_code == 200, twin.text
        assert twin.json()["output"] == "n3 done"
        first = final(http, url, started.json()["run_id"])
        assert first["status"] == "completed", first
        twin_record = http.get(f"{url}/api/v1/runs/{twin.json()['run_id']}", headers=AUTH).json()
        assert {first["workflow_id"], twin_record["workflow_id"]} == {
            "orchestra/acme/pipe/s1",
            "orchestra/acme/twin/s1",
        }
    assert ran(calls) == Counter({f"{n}@{worker.pid}": 2 for n in NODES})  # each agent's run, once


def test_a_killed_servers_run_moves_to_the_workers(temporal_address, tmp_path, calls, monkeypatch):
    """A pipeline that runs on the server (``runs_on: server``) is SIGKILLed with its server half way; on
    another server its run is ended ``needs_resume``, and ``POST /runs/{id}/move`` continues it on the
    worker: it completes there, and no node that had completed ran again. A plain invoke the killed
    server was following on the workers completes there, and its record is settled ``completed`` from
    the session."""
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.3")
    queue = "q-hosted-move"
    storage = f"sqlite:{tmp_path}/server.db"
    config = write_config(
        tmp_path,
        storage,
        f"temporal://{temporal_address}/default?task_queue={queue}",
        ", runs_on: server",
        "  - {id: long, spec: long.yaml, workspace: acme}\n",
    )
    with workers(temporal_address, queue, tmp_path / "hosted.yaml", tmp_path / "long.yaml") as pool:
        (worker,) = pool.running
        first, second = free_port(), free_port()
        killed = start_server(config, first)
        servers = [killed]
        try:
            with httpx.Client(timeout=60) as http:
                sessions = f"{storage}?prefix=ws/acme/agents"

                def follow_long() -> None:
                    with contextlib.suppress(httpx.TransportError):  # its server is killed while it waits
                        http.post(
                            f"http://127.0.0.1:{first}/api/v1/agents/long/invoke",
                            json={"input": "go", "session_id": "p1"},
                            headers=AUTH,
                        )

                following = threading.Thread(target=follow_long)
                following.start()
                wait_completed(f"{sessions}/long", "p1", "long")
                started = http.post(
                    f"http://127.0.0.1:{first}/api/v1/agents/pipe/runs",
                    json={"input": "go", "session_id": "s1"},
                    headers=AUTH,
                )
                assert started.status_code == 202, started.text
                run_id = started.json()["run_id"]
                wait_completed(f"{sessions}/pipe", "s1", count=2, alive=killed)
                followed_done = completed_in_session(f"{sessions}/long", "p1", "long")
                assert len(followed_done) < len(LONG_NODES)  # still going on when its server dies
                killed.send_signal(signal.SIGKILL)
                killed.wait(30)
                following.join(30)
                before = {n: pids for n, pids in nodes_by(calls).items() if n.startswith("n")}
                assert all(pids == [killed.pid] for pids in before.values()), before
                assert 2 <= len(before) < len(NODES)
                servers.append(start_server(config, second))
                url = f"http://127.0.0.1:{second}"
                stranded = final(http, url, run_id)
                assert stranded["status"] == "interrupted", stranded
                assert stranded["needs_resume"], stranded
                moved = http.post(f"{url}/api/v1/runs/{run_id}/move", headers=AUTH)
                assert moved.status_code == 202, moved.text
                record = final(http, url, moved.json()["run_id"])
                assert record["status"] == "completed", record
                assert record["workflow_id"] == "orchestra/acme/pipe/s1"
                assert record["output"] == "n3 done"
                assert (
                    http.get(f"{url}/api/v1/runs/{run_id}", headers=AUTH).json()["resumed_by"]
                    == record["run_id"]
                )
                # The plain invoke the killed server followed went on on the worker; its record is settled
                # from the session once it ended there.
                wait_completed(f"{sessions}/long", "p1", "long", count=len(LONG_NODES))
                (followed,) = http.get(f"{url}/api/v1/runs?agent_id=long", headers=AUTH).json()["runs"]
                settled = final(http, url, followed["run_id"])
                assert settled["status"] == "completed", settled
                assert settled["output"] == "l5 done"
        finally:
            for process in servers:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                process.communicate(timeout=30)
    after = nodes_by(calls)
    assert {n: after.pop(n) for n in LONG_NODES} == {n: [worker.pid] for n in LONG_NODES}
    assert set(after) == set(NODES)
    last_before = NODES[len(before) - 1]  # it may have been running when the server died
    for node in NODES:
        if node in before and node != last_before:
            assert after[node] == [killed.pid], after  # completed on the server: never again
        else:
            assert after[node][-1] == worker.pid, after
            assert after[node].count(worker.pid) == 1, after


def test_what_a_server_refuses_is_one_line(tmp_path):
    """Memory storage, an agent sent to workers, a pipeline on workers whose policy replaces runs, and a
    server without the temporal extra are refused at start, each with one line that names what failed."""
    target = "temporal://127.0.0.1:7233/default?task_queue=q"
    with pytest.raises(ConfigurationError) as memory:
        load_config(write_config(tmp_path, "memory", target))
    assert len(str(memory.value).splitlines()) == 1
    assert "storage: memory storage" in str(memory.value)
    assert "workers share" in str(memory.value)
    config = write_config(tmp_path, f"file:{tmp_path}/store", target)
    config.write_text(
        config.read_text().replace(
            "workspace: acme}\n  - {id: chat, spec: chat.yaml, workspace: acme",
            "workspace: acme}\n  - {id: chat, spec: chat.yaml, workspace: acme, runs_on: workers",
        )
    )
    with pytest.raises(ConfigurationError) as agent:
        load_config(config)
    assert len(str(agent.value).splitlines()) == 1
    assert "'chat' is an agent: only graphs and swarms run on workers" in str(agent.value)
    config = write_config(tmp_path, f"file:{tmp_path}/store", target, ", on_busy: interrupt")
    with pytest.raises(ConfigurationError) as policy:
        load_config(config)
    assert len(str(policy.value).splitlines()) == 1
    assert "agents[0].on_busy: 'pipe' runs on Temporal workers, where on_busy 'interrupt'" in str(
        policy.value
    )

    config = write_config(tmp_path, f"file:{tmp_path}/store", None)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    without = subprocess.run(
        [
            sys.executable,
            "-c",
            # As if temporalio were not installed: importing it raises ImportError.
            "import sys; sys.modules['temporalio'] = None; from orchestra.cli import main; main()",
            "serve",
            str(config),
            "--port",
            str(free_port()),
            "--temporal",
            target,
        ],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert without.returncode != 0
    lines = without.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "temporal: pipelines on Temporal workers need the temporal extra" in lines[0]
    assert "pip install 'orchestra-agents[temporal]'" in lines[0]


def test_an_unreachable_temporal_is_a_503_that_says_where(tmp_path):
    """A run sent to a Temporal nobody listens on is answered 503 ``temporal_unavailable`` in one line
    naming the address, and so is a session delete, which deletes nothing then; a run without a session
    is refused (400), as the workflow keeps it in one."""
    config = write_config(tmp_path, f"file:{tmp_path}/store", "temporal://127.0.0.1:1/default?task_queue=q")
    with Server(config) as server, httpx.Client(timeout=60) as http:
        answer = http.post(
            f"{server.url}/api/v1/agents/pipe/invoke", json={"input": "go", "session_id": "s1"}, headers=AUTH
        )
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "temporal_unavailable"
        assert "the Temporal workers at temporal://127.0.0.1:1/" in error["message"]
        assert len(error["message"].splitlines()) == 1
        no_session = http.post(f"{server.url}/api/v1/agents/pipe/invoke", json={"input": "go"}, headers=AUTH)
        assert no_session.status_code == 400, no_session.text
        assert no_session.json()["error"]["code"] == "session_required"
        # A message that would replace the session's run: the workflow would resume the stopped one instead.
        replacing = http.post(
            f"{server.url}/api/v1/agents/pipe/invoke",
            json={"input": "go", "session_id": "s1", "on_busy": "rollback"},
            headers=AUTH,
        )
        assert replacing.status_code == 400, replacing.text
        assert replacing.json()["error"]["code"] == "policy_not_on_workers"
        chat = http.post(f"{server.url}/api/v1/agents/chat/invoke", json={"input": "hi"}, headers=AUTH)
        assert chat.status_code == 200, chat.text  # an agent stays on the server
        # A session delete cannot tell whether the workers still run the session: nothing is deleted.
        delete = http.delete(f"{server.url}/api/v1/agents/pipe/sessions/s1", headers=AUTH)
        assert delete.status_code == 503, delete.text
        error = delete.json()["error"]
        assert error["code"] == "temporal_unavailable"
        assert "cannot stop the workflow orchestra/acme/pipe/s1" in error["message"]
        assert "the session is not deleted" in error["message"]
        assert len(error["message"].splitlines()) == 1
        # An agent's session never asks Temporal (its turns never run there).
        assert http.delete(f"{server.url}/api/v1/agents/chat/sessions/s9", headers=AUTH).status_code == 404


def test_workflow_ids_of_two_tenants_never_meet():
    """Ids may hold "-": "acme"/"eu"/"bot-42" and "acme-eu"/"bot"/"42" are two sessions of two workspaces,
    and get two workflows (one shared would let a request of one workspace answer the other's run)."""
    from orchestra.hosting.config import HostedSpec
    from orchestra.hosting.invocation import Invocation
    from orchestra.hosting.workers import Workers

    one = Invocation(HostedSpec(id="eu", spec="p.yaml", workspace="acme"), "go", "bot-42", None)
    other = Invocation(HostedSpec(id="bot", spec="p.yaml", workspace="acme-eu"), "go", "42", None)
    assert Workers.workflow_of(one) != Workers.workflow_of(other)
    assert Workers.workflow_of(one) == "orchestra/acme/eu/bot-42"


def test_deleting_a_session_terminates_its_workflow_first(temporal_address, tmp_path, calls):
    """A session whose run waits on the workers (for a human) is deleted: its workflow is terminated
    before the session's data goes, so it never goes on into the deleted session; once the worker has
    stopped, nothing of the session is stored (its journal's tombstones hold nothing but a time), and its
    words are nowhere in the storage."""
    from tests.server.test_deleted_sessions import stored_values

    queue = "q-hosted-delete"
    storage = f"sqlite:{tmp_path}/server.db"
    config = write_config(tmp_path, storage, f"temporal://{temporal_address}/default?task_queue={queue}")
    sessions = f"{storage}?prefix=ws/acme/agents/approval"
    secret = "card-4111-deleted"
    # The worker stops (SIGTERM: whatever it still ran ends, and writes, first) before the storage is read.
    with (
        workers(temporal_address, queue, tmp_path / "approval.yaml") as pool,
        Server(config) as server,
        httpx.Client(timeout=60) as http,
    ):
        (worker,) = pool.running
        asked = http.post(
            f"{server.url}/api/v1/agents/approval/invoke",
            json={"input": secret, "session_id": "d1"},
            headers=AUTH,
        )
        assert asked.json()["status"] == "interrupted", asked.text
        assert any(secret.encode() in value for _, value in stored_values(sessions))  # the check sees it
        workflow = "orchestra/acme/approval/d1"
        assert anyio.run(workflow_status, temporal_address, workflow) == "RUNNING"
        deleted = http.delete(f"{server.url}/api/v1/agents/approval/sessions/d1", headers=AUTH)
        assert deleted.status_code == 204, deleted.text
        assert anyio.run(workflow_status, temporal_address, workflow) == "TERMINATED"
    left = [key for key, value in stored_values(sessions) if json.loads(value).keys() != {"t", "deleted"}]
    assert left == [], f"the deleted session is stored again: {left}"
    left = [key for key, value in stored_values(storage) if secret.encode() in value]
    assert left == [], f"the deleted session's words are still stored under {left}"
    assert ran(calls) == Counter({f"draft@{worker.pid}": 1})


def test_a_followed_run_whose_session_is_deleted_says_so(temporal_address, tmp_path, calls, monkeypatch):
    """A run the server follows on the workers when its session is deleted ends ``failed``, saying that
    its workflow was terminated because the session was deleted (not who else might have ended it)."""
    monkeypatch.setenv("ORCHESTRA_TEST_STEP_SECONDS", "0.3")
    queue = "q-hosted-delete-followed"
    storage = f"sqlite:{tmp_path}/server.db"
    config = write_config(
        tmp_path,
        storage,
        f"temporal://{temporal_address}/default?task_queue={queue}",
        more="  - {id: long, spec: long.yaml, workspace: acme}\n",
    )
    with (
        workers(temporal_address, queue, tmp_path / "long.yaml"),
        Server(config) as server,
        httpx.Client(timeout=60) as http,
    ):
        run = http.post(
            f"{server.url}/api/v1/agents/long/runs", json={"input": "go", "session_id": "d2"}, headers=AUTH
        )
        assert run.status_code == 202, run.text
        wait_completed(f"{storage}?prefix=ws/acme/agents/long", "d2", "long")
        deleted = http.delete(f"{server.url}/api/v1/agents/long/sessions/d2", headers=AUTH)
        assert deleted.status_code == 204, deleted.text
        record = final(http, server.url, run.json()["run_id"])
    assert record["status"] == "failed", record
    assert "the run failed on the Temporal workers: session d2 of 'long' was deleted" in record["error"]


def test_answers_to_a_workflow_that_ended_first_are_a_409_naming_it(
    temporal_address, tmp_path, calls, monkeypatch
):
    """Answers that reach a run's workflow just after it ended (another server stopped it between the look
    and the signal) are refused 409 ``workflow_ended``, naming the workflow: Temporal answered, so it is
    never a 503 that asks whether Temporal is up."""
    from temporalio.client import WorkflowHandle

    queue = "q-hosted-ended"
    config = write_config(
        tmp_path, f"sqlite:{tmp_path}/server.db", f"temporal://{temporal_address}/default?task_queue={queue}"
    )
    original = WorkflowHandle.signal

    async def ended_first(self, *args, **kwargs):
        await self.terminate(reason="stopped by another server")  # just before the answers arrive
        return await original(self, *args, **kwargs)

    with (
        workers(temporal_address, queue, tmp_path / "approval.yaml"),
        Server(config) as server,
        httpx.Client(timeout=60) as http,
    ):
        asked = http.post(
            f"{server.url}/api/v1/agents/approval/invoke",
            json={"input": "go", "session_id": "e1"},
            headers=AUTH,
        ).json()
        assert asked["status"] == "interrupted", asked
        monkeypatch.setattr(WorkflowHandle, "signal", ended_first)
        answered = http.post(
            f"{server.url}/api/v1/agents/approval/invoke",
            json={
                "session_id": "e1",
                "responses": [{"interrupt_id": asked["interrupts"][0]["id"], "response": "yes"}],
            },
            headers=AUTH,
        )
    assert answered.status_code == 409, answered.text
    error = answered.json()["error"]
    assert error["code"] == "workflow_ended", error
    assert (
        "the workflow orchestra/acme/approval/e1 of session e1 ended before the answers" in error["message"]
    )
    assert len(error["message"].splitlines()) == 1


async def start_elsewhere(address: str, workflow_id: str) -> None:
    """Start a workflow under ``workflow_id`` as another client would (on a queue no worker polls: it
    stays running)."""
    from orchestra import temporal

    client = await temporal.connect(temporal.TemporalTarget(address, "default", "any"))
    await client.start_workflow("someone-elses", id=workflow_id, task_queue="q-nobody-polls")


def test_a_workflow_started_elsewhere_under_a_runs_id_is_a_409(temporal_address, tmp_path, monkeypatch):
    """A workflow that another client runs under a hosted run's id is not followed nor started twice: the
    run is refused 409 ``session_busy`` naming it, whether it was running before the run looked (b1) or
    was started between the look and the start (b2: Temporal refuses the start)."""
    from temporalio.client import Client

    queue = "q-hosted-busy"
    config = write_config(
        tmp_path, f"sqlite:{tmp_path}/server.db", f"temporal://{temporal_address}/default?task_queue={queue}"
    )
    anyio.run(start_elsewhere, temporal_address, "orchestra/acme/pipe/b1")
    original = Client.start_workflow

    async def started_first_elsewhere(self, *args, **kwargs):
        if kwargs.get("id") == "orchestra/acme/pipe/b2":  # another client's start, just before
            await original(self, "someone-elses", id=kwargs["id"], task_queue="q-nobody-polls")
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Client, "start_workflow", started_first_elsewhere)
    with Server(config) as server, httpx.Client(timeout=60) as http:
        for session in ("b1", "b2"):
            answer = http.post(
                f"{server.url}/api/v1/agents/pipe/invoke",
                json={"input": "go", "session_id": session},
                headers=AUTH,
            )
            assert answer.status_code == 409, answer.text
            error = answer.json()["error"]
            assert error["code"] == "session_busy", error
            assert f"workflow orchestra/acme/pipe/{session}" in error["message"], error


def test_a_stop_while_the_workflow_starts_terminates_it_once_started(temporal_address, tmp_path, monkeypatch):
    """A cancel that lands while Temporal is starting the run's workflow (the start made there, its answer
    not yet back) does not leave the workflow running with nothing to stop it: it is terminated once its
    start returns, and the run ends interrupted."""
    from temporalio.client import Client

    queue = "q-hosted-stop-start"
    config = write_config(
        tmp_path, f"sqlite:{tmp_path}/server.db", f"temporal://{temporal_address}/default?task_queue={queue}"
    )
    original = Client.start_workflow
    started, cancelled = threading.Event(), threading.Event()

    async def slow_answer(self, *args, **kwargs):
        handle = await original(self, *args, **kwargs)  # made on Temporal; its answer "on the way back"
        started.set()
        await anyio.to_thread.run_sync(cancelled.wait, abandon_on_cancel=True)  # a cancel may end the wait
        return handle

    monkeypatch.setattr(Client, "start_workflow", slow_answer)
    with Server(config) as server, httpx.Client(timeout=60) as http:
        run = http.post(
            f"{server.url}/api/v1/agents/pipe/runs", json={"input": "go", "session_id": "s1"}, headers=AUTH
        )
        assert run.status_code == 202, run.text
        run_id = run.json()["run_id"]
        assert started.wait(60)
        assert http.post(f"{server.url}/api/v1/runs/{run_id}/cancel", headers=AUTH).status_code == 202
        cancelled.set()
        record = final(http, server.url, run_id)
        assert record["status"] == "interrupted", record
    assert anyio.run(workflow_status, temporal_address, "orchestra/acme/pipe/s1") == "TERMINATED"
