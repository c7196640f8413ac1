"""Three ``orchestra serve`` processes on one PostgreSQL database, one SIGKILLed while clients keep
talking to all three: no acknowledged turn is lost, none is stored twice, and every session stays a
sequence of whole turns, each answered with the turns before it."""

from __future__ import annotations

import random
import signal

import anyio
import httpx

from tests.server.conftest import auth, write_config
from tests.server.test_concurrency import free_port, start_server

CLIENTS, TURNS, SESSIONS = 12, 8, 4
KILL_AFTER = 30  # acknowledged turns before the third server is killed


async def drive(urls: list[str], victim: str, kill) -> dict[str, set[str]]:
    """Clients send their turns to random live servers; returns the turns answered 200 and those whose
    answer was lost to the kill (which may or may not have been stored, and are not sent again)."""
    outcome: dict[str, set[str]] = {"acknowledged": set(), "unknown": set()}
    dead = anyio.Event()

    async def client(index: int, http: httpx.AsyncClient) -> None:
        rng = random.Random(index)
        session = f"s{index % SESSIONS}"
        for turn in range(TURNS):
            text = f"c{index}-t{turn}"
            while True:
                url = rng.choice([u for u in urls if not (dead.is_set() and u == victim)])
                try:
                    reply = await http.post(
                        f"{url}/api/v1/agents/chat/invoke", json={"input": text, "session_id": session}
                    )
                except httpx.TransportError:
                    assert url == victim, f"{url} failed though it was not killed"
                    outcome["unknown"].add(text)
                    break
                if reply.status_code == 200:
                    outcome["acknowledged"].add(text)
                    if len(outcome["acknowledged"]) == KILL_AFTER:
                        kill()
                        dead.set()
                    break
                assert reply.status_code == 409, reply.text  # another server saved the session first
                await anyio.sleep(rng.uniform(0, 0.05))

    async with httpx.AsyncClient(headers=auth(), timeout=60) as http, anyio.create_task_group() as group:
        for index in range(CLIENTS):
            group.start_soon(client, index, http)
    return outcome


def test_three_servers_on_one_database_one_killed_under_load(tmp_path, postgres_uri):
    config = write_config(tmp_path, f"'{postgres_uri}'")
    ports = [free_port() for _ in range(3)]
    servers = [start_server(config, port) for port in ports]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        outcome = anyio.run(drive, urls, urls[2], lambda: servers[2].send_signal(signal.SIGKILL))
        assert servers[2].wait(10) == -signal.SIGKILL
        assert len(outcome["acknowledged"]) > KILL_AFTER  # the other two went on serving

        stored: list[str] = []
        for session in range(SESSIONS):
            answer = httpx.get(
                f"{urls[0]}/api/v1/agents/chat/sessions/s{session}", headers=auth(), timeout=30
            )
            messages = answer.json()["messages"]
            assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
            users = [m["content"][0]["text"] for m in messages[0::2]]
            answers = [m["content"][0]["text"] for m in messages[1::2]]
            for position, (user, reply) in enumerate(zip(users, answers, strict=True)):
                assert reply == f"echo: {user} (turn {position + 1})"  # saw exactly the turns before it
            for client in range(session, CLIENTS, SESSIONS):  # a client's turns keep their order
                mine = [int(u.split("-t")[1]) for u in users if u.startswith(f"c{client}-")]
                assert mine == sorted(mine)
            stored += users
        assert len(stored) == len(set(stored)), "a turn was stored twice"
        assert outcome["acknowledged"] <= set(stored), "an acknowledged turn was lost"
        assert set(stored) <= outcome["acknowledged"] | outcome["unknown"]
    finally:
        for process in servers:
            if process.poll() is None:
                process.terminate()
                process.wait(20)
            process.stderr.close()
