"""The server as an agent platform, with real processes (``orchestra serve``) and real HTTP:

- a background run survives a SIGKILL of its server and is finished by a second server on the storage;
- a client that drops its stream at random points and reattaches, across a restart, sees every event
  exactly once, in order;
- interrupts are answered from a second process after a restart;
- each policy for a second message gets 20 concurrent requests on one session over two servers on
  moto's S3, and the final history is what the policy promises.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from tests.server.conftest import KEYS, WEBHOOK_SECRET, auth, write_platform_config
from tests.server.test_concurrency import free_port

ROOT = Path(__file__).parent.parent.parent

CHAIN = """version: 1
kind: graph
id: chain
nodes:
  - {id: n1, function: 'tests.support:slow_step'}
  - {id: n2, function: 'tests.support:slow_step'}
  - {id: n3, function: 'tests.support:slow_step'}
  - {id: n4, function: 'tests.support:slow_step'}
  - {id: n5, function: 'tests.support:slow_step'}
  - {id: n6, function: 'tests.support:slow_step'}
edges:
  - {from: n1, to: n2}
  - {from: n2, to: n3}
  - {from: n3, to: n4}
  - {from: n4, to: n5}
  - {from: n5, to: n6}
"""


class Servers:
    """``orchestra serve`` processes on one config, started and stopped by the test."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.config = config
        self.env = {
            **os.environ,
            **env,
            "ORCHESTRA_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, port: int | None = None, *options: str) -> str:
        port = port or free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from orchestra.cli import main; main()",
                "serve",
                str(self.config),
                *("--port", str(port)),
                *("--access-log", "off"),  # stderr is a pipe nobody reads while the server runs
                *options,
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                    self.processes[url] = process
                    return url
            except httpx.TransportError:
                time.sleep(0.1)
        process.kill()
        raise RuntimeError(f"server did not start: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]

    def kill(self, url: str) -> None:
        process = self.processes.pop(url)
        process.send_signal(signal.SIGKILL)
        process.wait(20)
        process.stderr.close()  # type: ignore[union-attr]

    def close(self) -> None:
        for url in list(self.processes):
            process = self.processes.pop(url)
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(20)
            process.stderr.close()  # type: ignore[union-attr]


@pytest.fixture
def servers(tmp_path):
    made: list[Servers] = []

    def make(config: Path, **env: str) -> Servers:
        made.append(Servers(config, env))
        return made[-1]

    yield make
    for group in made:
        group.close()


def get(url: str, path: str) -> dict:
    return httpx.get(f"{url}{path}", headers=auth(), timeout=30).json()


def wait_for(predicate, timeout: float = 60, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


def final_record(url: str, run_id: str, timeout: float = 60) -> dict:
    def ended() -> dict | None:
        record = get(url, f"/api/v1/runs/{run_id}")
        return record if record["status"] not in ("queued", "executing") else None

    return wait_for(ended, timeout)


def read_events(url: str, run_id: str, after: int = 0, limit: int | None = None) -> list[dict]:
    """Up to ``limit`` events after id ``after`` (then the connection is dropped)."""
    got: list[dict] = []
    headers = {**auth(), "Last-Event-ID": str(after)}
    with httpx.stream("GET", f"{url}/api/v1/runs/{run_id}/stream", headers=headers, timeout=30) as response:
        assert response.status_code == 200
        event: dict = {}
        for line in response.iter_lines():
            if line.startswith("id: "):
                event["id"] = int(line[4:])
            elif line.startswith("event: "):
                event["event"] = line[7:]
            elif line.startswith("data: "):
                event["data"] = json.loads(line[6:])
                got.append(event)
                event = {}
                if limit is not None and len(got) >= limit:
                    break  # drop the connection here
    return got


def chain_config(root: Path, storage: str) -> Path:
    config = write_platform_config(root, storage)
    (root / "chain.yaml").write_text(CHAIN)
    text = config.read_text().replace(
        "  - {id: other,", "  - {id: chain, spec: chain.yaml, workspace: acme}\n  - {id: other,"
    )
    config.write_text(text)
    return config


def test_a_background_run_survives_a_sigkill_and_a_second_server_finishes_it(tmp_path, servers):
    calls = tmp_path / "calls.txt"
    group = servers(
        chain_config(tmp_path, f"file:{tmp_path}/store"),
        ORCHESTRA_TEST_CALLS=str(calls),
        ORCHESTRA_TEST_STEP_SECONDS="0.4",
    )
    first, second = group.start(), group.start()
    accepted = httpx.post(
        f"{first}/api/v1/agents/chain/runs",
        json={"input": "go", "session_id": "k"},
        headers=auth(),
        timeout=30,
    )
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["run_id"]
    wait_for(lambda: calls.exists() and len(calls.read_text().split()) >= 3)
    server_of_first = get(first, f"/api/v1/runs/{run_id}")["server"]
    group.kill(first)

    record = final_record(second, run_id)
    assert record["status"] == "completed", record
    assert record["attempt"] == 2
    assert record["server"] != server_of_first
    assert record["output"] == "n6 done"
    ran = calls.read_text().split()
    # Completed nodes are not run again; the one running at the kill is (at least once per node).
    assert sorted(set(ran)) == [f"n{i}" for i in range(1, 7)]
    assert len(ran) - 6 <= 1
    events = read_events(second, run_id)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    attempts = [e["data"]["attempt"] for e in events if e["event"] == "status" and "attempt" in e["data"]]
    assert attempts == [1, 2]
    assert events[-1]["event"] == "result"
    assert events[-1]["data"]["status"] == "completed"


def test_a_client_that_drops_its_stream_and_reattaches_across_a_restart_sees_every_event_once(
    tmp_path, servers
):
    group = servers(write_platform_config(tmp_path, f"file:{tmp_path}/store"), ORCHESTRA_TEST_DELAY="0.6")
    url = group.start()
    run_id = httpx.post(
        f"{url}/api/v1/agents/steps/runs",
        json={"input": "story", "session_id": "s"},
        headers=auth(),
        timeout=30,
    ).json()["run_id"]
    rng = random.Random(27)
    seen: list[dict] = []
    restarted = False
    while not seen or seen[-1]["event"] not in ("result", "error"):
        try:
            seen.extend(read_events(url, run_id, seen[-1]["id"] if seen else 0, limit=rng.randint(1, 6)))
        except httpx.TransportError:
            time.sleep(0.05)  # the server is gone: try again (the restarted one, once it is up)
        if not restarted and len(seen) >= 12:
            group.kill(url)
            url = group.start()  # a restart on the same storage: it takes the run over
            restarted = True
    assert restarted
    ids = [e["id"] for e in seen]
    assert ids == list(range(1, len(ids) + 1))  # each once, in order, none missing
    assert seen == read_events(url, run_id)  # what a client reading it whole gets now
    assert seen[-1]["data"]["status"] == "completed"
    assert [e["data"].get("attempt") for e in seen if e["event"] == "status"][1:] == [1, 2]


def test_a_stopped_server_cancels_open_streams_after_its_graceful_timeout(tmp_path, servers):
    # The model takes a minute; SIGTERM with --graceful-timeout 1 cuts the streamed turn instead of
    # waiting for it, and the turn is not stored.
    group = servers(write_platform_config(tmp_path, f"file:{tmp_path}/store"), ORCHESTRA_TEST_DELAY="60")
    url = group.start(None, "--graceful-timeout", "1")
    body = {"input": "a long one", "session_id": "long"}
    invoke = f"{url}/api/v1/agents/slow/invoke?stream=true"
    with httpx.stream("POST", invoke, json=body, headers=auth(), timeout=120) as response:
        assert response.status_code == 200
        wait_for(lambda: get(url, "/api/v1/runs?session_id=long")["runs"])  # the turn runs
        process = group.processes.pop(url)
        process.terminate()
        process.wait(30)  # far less than the model's minute
        process.stderr.close()  # type: ignore[union-attr]
    url = group.start()
    session = httpx.get(f"{url}/api/v1/agents/slow/sessions/long", headers=auth(), timeout=30)
    assert session.status_code == 404 or session.json()["messages"] == [], session.text


def test_interrupts_are_answered_from_a_second_process_after_a_restart(tmp_path, servers):
    group = servers(write_platform_config(tmp_path, f"file:{tmp_path}/store"))
    url = group.start()
    pay = httpx.post(
        f"{url}/api/v1/agents/payer/invoke",
        json={"input": "pay it", "session_id": "p"},
        headers=auth(),
        timeout=30,
    ).json()
    review = httpx.post(
        f"{url}/api/v1/agents/review/runs",
        json={"input": "ship", "session_id": "r"},
        headers=auth(),
        timeout=30,
    ).json()
    reviewed = final_record(url, review["run_id"])
    assert (pay["status"], reviewed["status"]) == ("interrupted", "interrupted")
    group.kill(url)
    url = group.start()  # restarted: nothing of the first process is left but the storage

    answer = f"""
import json, sys
from orchestra.client import Client
with Client({url!r}, {KEYS["acme"]!r}) as client:
    paid = client.respond("payer", [{{"interrupt_id": {pay["interrupts"][0]["id"]!r}, "response": "yes"}}], session_id="p")
    run = client.start_run("review", session_id="r", responses=[{{"interrupt_id": {reviewed["interrupts"][0]["id"]!r}, "response": "ok"}}])
    done = client.wait(run.run_id, timeout=60)
    print(json.dumps({{"paid": paid.status, "output": paid.output, "review": done["status"]}}))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    other = subprocess.run(
        [sys.executable, "-c", answer], env=env, capture_output=True, text=True, timeout=120
    )
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout) == {
        "paid": "completed",
        "output": "Payment handled.",
        "review": "completed",
    }


POLICY_CLIENTS = 20


async def send_twenty(urls: list[str], session_id: str, policy: str) -> list[tuple[str, httpx.Response]]:
    """Twenty messages to one session, each to a random server, spread over about two seconds."""
    rng = random.Random(policy)
    answers: list[tuple[str, httpx.Response]] = []

    async def send(index: int, http: httpx.AsyncClient) -> None:
        await anyio.sleep(rng.uniform(0, 2.0))
        text = f"m{index:02d}"
        body = {"input": text, "session_id": session_id, "on_busy": policy}
        answers.append((text, await http.post(f"{rng.choice(urls)}/api/v1/agents/slow/invoke", json=body)))

    async with httpx.AsyncClient(headers=auth(), timeout=120) as http, anyio.create_task_group() as group:
        for index in range(POLICY_CLIENTS):
            group.start_soon(send, index, http)
    return answers


def history(url: str, session_id: str) -> list[tuple[str, str]]:
    """The session's turns: (user text, the assistant's reply)."""
    messages = get(url, f"/api/v1/agents/slow/sessions/{session_id}")["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
    return [
        (u["content"][0]["text"], a["content"][0]["text"])
        for u, a in zip(messages[0::2], messages[1::2], strict=True)
    ]


def finished_order(url: str, session_id: str) -> list[str]:
    """The inputs of the session's runs, in the order they ended (their records)."""
    runs = httpx.get(
        f"{url}/api/v1/runs",
        params={"agent_id": "slow", "session_id": session_id},
        headers=auth(),
        timeout=30,
    ).json()["runs"]
    return [r["input"] for r in sorted(runs, key=lambda r: r["finished_at"])]


@pytest.fixture(scope="module")
def two_s3_servers(tmp_path_factory, moto_url):
    import boto3

    bucket = f"policies-{os.getpid()}"
    boto3.client("s3", endpoint_url=moto_url).create_bucket(Bucket=bucket)
    root = tmp_path_factory.mktemp("policies")
    config = write_platform_config(
        root,
        f"s3://{bucket}/server?endpoint_url={moto_url}",
        # Gone after 10 s: moto serves one request at a time, and under load a heartbeat can wait seconds.
        extra="runs: {heartbeat_s: 0.2, server_gone_after_s: 10, poll_s: 0.05, sweep_s: 0.5, max_queue: 25}\n",
    )
    group = Servers(config, {"ORCHESTRA_TEST_DELAY": "0.25"})
    try:
        yield [group.start(), group.start()]
    finally:
        group.close()


def test_reject_with_twenty_messages_on_two_servers(two_s3_servers):
    answers = anyio.run(send_twenty, two_s3_servers, "reject", "reject")
    accepted = [t for t, a in answers if a.status_code == 200]
    refused = [a for _, a in answers if a.status_code != 200]
    assert accepted
    # On the server that runs the session: session_busy at once; on the other: the session's conditional
    # writes refuse the second writer (session_conflict), as they always did. Neither stored anything.
    assert {(a.status_code, a.json()["error"]["code"]) for a in refused} <= {
        (409, "session_busy"),
        (409, "session_conflict"),
    }
    turns = history(two_s3_servers[0], "reject")
    assert sorted(t for t, _ in turns) == sorted(accepted)  # each accepted message once, no refused one
    assert [r for _, r in turns] == [f"echo: {t} (turn {i + 1})" for i, (t, _) in enumerate(turns)]


def test_enqueue_with_twenty_messages_on_two_servers(two_s3_servers):
    answers = anyio.run(send_twenty, two_s3_servers, "enqueue", "enqueue")
    assert {a.status_code for _, a in answers} == {200}  # the queue holds them (max_queue 25)
    turns = history(two_s3_servers[0], "enqueue")
    assert sorted(t for t, _ in turns) == sorted(t for t, _ in answers)  # all, each once
    assert [r for _, r in turns] == [f"echo: {t} (turn {i + 1})" for i, (t, _) in enumerate(turns)]
    assert [t for t, _ in turns] == finished_order(two_s3_servers[0], "enqueue")  # one after another
    for text, answer in answers:  # each request was answered with its own turn
        assert answer.json()["output"] == dict(turns)[text]


def test_interrupt_with_twenty_messages_on_two_servers(two_s3_servers):
    answers = anyio.run(send_twenty, two_s3_servers, "interrupt", "interrupt")
    assert {a.status_code for _, a in answers} == {200}
    turns = history(two_s3_servers[0], "interrupt")
    assert [t for t, _ in turns] == finished_order(two_s3_servers[0], "interrupt")
    assert sorted(t for t, _ in turns) == sorted(t for t, _ in answers)  # every message, once
    by_text = {t: a.json() for t, a in answers}
    stopped = [t for t, a in by_text.items() if a["status"] == "interrupted"]
    assert stopped  # some runs were stopped by a newer message
    for position, (text, reply) in enumerate(turns):
        if by_text[text]["status"] == "interrupted":
            assert reply == "(interrupted by a newer message)"
            assert by_text[text]["stopped"]["by"] == "interrupt"
        else:
            assert reply == f"echo: {text} (turn {position + 1})"  # it saw every turn before it
    assert by_text[turns[-1][0]]["status"] == "completed"  # the last message ran to the end


def test_rollback_with_twenty_messages_on_two_servers(two_s3_servers):
    answers = anyio.run(send_twenty, two_s3_servers, "rollback", "rollback")
    completed = [t for t, a in answers if a.status_code == 200]
    rolled_back = [t for t, a in answers if a.status_code == 409]
    assert {a.status_code for _, a in answers} <= {200, 409}
    assert rolled_back  # some turns were discarded by a newer message
    assert all(a.json()["error"]["code"] == "run_rolled_back" for _, a in answers if a.status_code == 409)
    turns = history(two_s3_servers[0], "rollback")
    assert sorted(t for t, _ in turns) == sorted(completed)  # only what completed, once each
    assert [r for _, r in turns] == [f"echo: {t} (turn {i + 1})" for i, (t, _) in enumerate(turns)]
