"""One writer per session across server processes: 50 clients x 10 turns over 10 sessions against two
server processes sharing one storage. Afterwards every session holds exactly its turns, each user turn
directly followed by its own answer: none lost, none interleaved."""

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from tests.server.conftest import auth, write_config

ROOT = Path(__file__).parent.parent.parent
CLIENTS, TURNS, SESSIONS = 50, 10, 10


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(config, port, workers=1):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from orchestra.cli import main; main()",
            "serve",
            str(config),
            "--port",
            str(port),
            "--workers",
            str(workers),
            *("--access-log", "off"),  # stderr is a pipe nobody reads while the server runs
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not start: {process.stderr.read().decode()[-2000:]}")


async def run_clients(urls):
    conflicts = 0

    async def client(index: int, http: httpx.AsyncClient) -> None:
        nonlocal conflicts
        rng = random.Random(index)
        session = f"s{index % SESSIONS}"
        for turn in range(TURNS):
            text = f"c{index}-t{turn}"
            while True:
                url = rng.choice(urls)
                reply = await http.post(
                    f"{url}/api/v1/agents/chat/invoke", json={"input": text, "session_id": session}
                )
                if reply.status_code == 200:
                    break
                assert reply.status_code == 409, reply.text
                assert reply.headers["retry-after"] == "1"
                conflicts += 1
                await anyio.sleep(rng.uniform(0, 0.05))

    async with httpx.AsyncClient(headers=auth(), timeout=60) as http, anyio.create_task_group() as group:
        for index in range(CLIENTS):
            group.start_soon(client, index, http)
    return conflicts


def check_sessions(url):
    for session in range(SESSIONS):
        messages = httpx.get(
            f"{url}/api/v1/agents/chat/sessions/s{session}", headers=auth(), timeout=30
        ).json()["messages"]
        users = [m["content"][0]["text"] for m in messages[0::2]]
        answers = [m["content"][0]["text"] for m in messages[1::2]]
        assert [m["role"] for m in messages] == ["user", "assistant"] * (CLIENTS // SESSIONS * TURNS)
        expected = {f"c{c}-t{t}" for c in range(session, CLIENTS, SESSIONS) for t in range(TURNS)}
        assert sorted(users) == sorted(expected)  # every turn once: none lost, none twice
        for position, (user, answer) in enumerate(zip(users, answers, strict=True)):
            assert (
                answer == f"echo: {user} (turn {position + 1})"
            )  # each turn saw exactly the turns before it
        for client in range(session, CLIENTS, SESSIONS):  # a client's turns keep their order
            mine = [u for u in users if u.startswith(f"c{client}-")]
            assert mine == [f"c{client}-t{t}" for t in range(TURNS)]


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_two_server_processes_share_one_storage(backend, tmp_path, request):
    if backend == "local":
        storage = f"file:{tmp_path}/shared"
    else:
        storage = f"s3://{request.getfixturevalue('s3_bucket')}/server?endpoint_url={request.getfixturevalue('moto_url')}"
    config = write_config(tmp_path, storage)
    ports = [free_port(), free_port()]
    if backend == "local":  # two servers on one storage
        servers = [start_server(config, port) for port in ports]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
    else:  # one server with two worker processes
        servers = [start_server(config, ports[0], workers=2)]
        urls = [f"http://127.0.0.1:{ports[0]}"]
    try:
        anyio.run(run_clients, urls)
        check_sessions(urls[0])
    finally:
        for process in servers:
            process.terminate()
            process.wait(20)
            process.stderr.close()


async def test_a_stored_turn_has_its_run_record_even_if_the_server_dies_before_the_final_one(tmp_path):
    """The run record is written as "executing" beside the session load, before the turn is stored; the
    final record is queued and written after the answer. A server that dies in between (here: its
    runtime is dropped before the flush) leaves the "executing" record, never a stored turn without one."""
    from orchestra.hosting import Invocation, RunService
    from orchestra.server import load_config
    from tests.server.conftest import write_config

    config = load_config(write_config(tmp_path, f"file:{tmp_path}/store"))
    runtime = RunService(config)
    hosted = next(h for h in config.agents if h.id == "chat")
    record, _ = await runtime.invoke("acme", Invocation(hosted, "remember me", "s1", None))
    assert record.status == "completed"
    # Until the flush the live process answers from memory...
    assert [r.status for r in await runtime.runs("acme").list(["chat"], "s1")] == ["completed"]
    assert (await runtime.runs("acme").get(record.run_id)).status == "completed"

    restarted = RunService(config)  # ...and a process that starts after the "crash" finds the durable record
    runs = await restarted.runs("acme").list(["chat"], "s1")
    assert [(r.status, r.input) for r in runs] == [("executing", "remember me")]
    again, _ = await restarted.invoke("acme", Invocation(hosted, "and now?", "s1", None))
    assert again.status == "completed"
    assert len(again.messages) == 4  # the first turn was stored

    await restarted.flush_records("acme")
    await runtime.flush_records("acme")
    statuses = [r.status for r in await RunService(config).runs("acme").list(["chat"], "s1")]
    assert statuses == ["completed", "completed"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_session_that_fails_to_load_leaves_no_run_record(tmp_path, stream):
    """A corrupt session fails the turn before anything is stored; its "executing" record goes too, in
    the answered and in the streamed path alike."""
    from orchestra.hosting import Invocation, RunService
    from orchestra.server import load_config
    from tests.server.conftest import write_config

    config = load_config(write_config(tmp_path, f"file:{tmp_path}/store"))
    runtime = RunService(config)
    hosted = next(h for h in config.agents if h.id == "chat")
    await runtime.invoke("acme", Invocation(hosted, "first", "s1", None))
    await runtime.flush_records("acme")
    latest = next((tmp_path / "store").rglob("session/s1/**/snapshot_latest.json"))
    latest.write_text("{not json")

    runtime = RunService(config)  # a server that starts now loads the session (the first kept it in memory)
    turn = Invocation(hosted, "second", "s1", None)
    if stream:
        from orchestra.hosting.events import EventLog

        log = EventLog(runtime.unsynced("acme"), turn.run_id, 100)
        await runtime.invoke("acme", turn, log)
        assert [name for _, name, _ in log.events] == ["error"]
        assert log.events[0][2]["error"]["code"] == "session_damaged"
    else:
        record, failure = await runtime.invoke("acme", turn)
        assert (failure.status, failure.code, failure.stored) == (500, "session_damaged", False)
        assert "SnapshotError" in record.error
        assert "snapshot_latest.json" in record.error
    await runtime.flush_records("acme")
    runs = await RunService(config).runs("acme").list(["chat"], "s1")
    assert [r.input for r in runs] == ["first"]


async def test_a_structured_output_is_answered_and_recorded_as_json(tmp_path):
    """An agent with output_schema answers its output as a JSON object, over real HTTP, and its run
    record keeps the same object."""
    import httpx

    from orchestra.server import hash_key
    from tests.server.conftest import Server

    (tmp_path / "extract.yaml").write_text(
        "version: 1\nkind: agent\nid: extract\nagents:\n  - name: extract\n"
        "    model: {provider: scripted, replies: [{tool: Invoice, input: {customer: ACME, total: 12.5}}]}\n"
        "    output_schema: {title: Invoice, properties: {customer: {type: string}, total: {type: number}},"
        " required: [customer, total]}\n"
    )
    config = tmp_path / "server.yaml"
    config.write_text(
        f"version: 1\nstorage: file:{tmp_path}/store\nagents:\n  - {{id: extract, spec: extract.yaml, workspace: w}}\n"
        f"api_keys:\n  - {{workspace: w, sha256: {hash_key('k')}}}\n"
    )
    with Server(config) as running:
        async with httpx.AsyncClient(base_url=running.url, headers={"Authorization": "Bearer k"}) as http:
            answer = await http.post("/api/v1/agents/extract/invoke", json={"input": "read it"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["output"] == {"customer": "ACME", "total": 12.5}
            run = await http.get(f"/api/v1/runs/{answer.json()['run_id']}")
            assert run.json()["output"] == {"customer": "ACME", "total": 12.5}


async def test_a_failed_flush_keeps_the_records_for_the_next_one():
    """Storage that fails while run records are written after the answer loses none of them: they stay
    readable from memory and the next flush writes them."""
    from orchestra.errors import StorageUnavailableError
    from orchestra.hosting.records import RunRecord, RunStore
    from orchestra.storage import InMemoryStorage
    from orchestra.storage._base import ForwardingStorage

    class Flaky(ForwardingStorage):
        down = True

        async def write(self, key, data, *, expect=None):
            if self.down:
                raise StorageUnavailableError("storage down")
            return await self.inner.write(key, data, expect=expect)

    storage = InMemoryStorage()
    flaky = Flaky(storage)
    runs = RunStore(storage, flaky)
    record = RunRecord(
        run_id="r1", agent_id="a", kind="agent", mode="none", started_at="t", status="completed"
    )
    runs.save_later(record)
    await runs.flush()  # runs after the answer: logged, never raised (it would reset the connection)
    assert (await runs.get("r1")).status == "completed"  # still readable
    assert await RunStore(storage).get("r1") is None  # and not written yet
    flaky.down = False
    await runs.flush()
    assert (await RunStore(storage).get("r1")).status == "completed"  # written, read from storage
