"""``orchestra schedules ...`` against a server and against its storage (``--config``), and the search
options of ``orchestra runs list`` and ``orchestra sessions list --url``, with the client under them."""

from __future__ import annotations

import json

import anyio
import httpx
from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.client import AsyncClient, Client
from tests.server.conftest import KEYS, Server, auth, write_config

runner = CliRunner()

DAILY = '  - {id: daily, agent: chat, cron: "0 7 * * *", timezone: Europe/Paris, input: "report {date}"}\n'


def scheduled_config(tmp_path):
    config = write_config(tmp_path, f"file:{tmp_path}/store")
    config.write_text(config.read_text() + "schedules:\n" + DAILY)
    return config


def test_schedules_against_a_server_and_its_storage(tmp_path):
    config = scheduled_config(tmp_path)
    server_options = ["--url", "", "--api-key", KEYS["acme"]]
    with Server(config) as server:
        server_options[1] = server.url
        listed = runner.invoke(app, ["schedules", "list", *server_options, "--json"])
        assert listed.exit_code == 0, listed.output
        assert [(s["id"], s["paused"]) for s in json.loads(listed.output)] == [("daily", False)]
        paused = runner.invoke(app, ["schedules", "pause", "daily", *server_options])
        assert (paused.exit_code, paused.output.strip()) == (0, "daily: paused")
        ran = runner.invoke(app, ["schedules", "run-now", "daily", *server_options])
        assert ran.exit_code == 0, ran.output
        run_id = ran.output.split(":")[0]
        with Client(server.url, KEYS["acme"]) as client:
            while client.run(run_id)["status"] in ("queued", "executing"):
                pass
            assert client.run(run_id)["output"].startswith("echo: report 20")
        missing = runner.invoke(app, ["schedules", "pause", "nope", *server_options])
        assert missing.exit_code == 1
        assert "404 unknown_schedule" in missing.output
    # No server: the storage, through the config.
    listed = runner.invoke(app, ["schedules", "list", "--config", str(config)])
    assert listed.exit_code == 0, listed.output
    assert "daily" in listed.output
    assert "paused" in listed.output
    resumed = runner.invoke(app, ["schedules", "resume", "daily", "--config", str(config)])
    assert (resumed.exit_code, resumed.output.strip()) == (0, "daily: active")
    # A restart keeps what the storage says (not the config's default).
    with Server(config) as server, Client(server.url, KEYS["acme"]) as client:
        assert client.schedule("daily")["paused"] is False
        assert client.pause_schedule("daily")["paused"] is True
    with Server(config) as server, Client(server.url, KEYS["acme"]) as client:
        assert client.schedules()[0]["paused"] is True
    no_server = runner.invoke(app, ["schedules", "run-now", "daily"], env={"ORCHESTRA_URL": ""})
    assert no_server.exit_code != 0


def test_runs_and_sessions_lists_take_the_search_filters(tmp_path):
    with Server(write_config(tmp_path, f"file:{tmp_path}/store")) as server:
        with Client(server.url, KEYS["acme"]) as client:
            for index in range(3):
                client.invoke("chat", f"hi {index}", f"c{index}", metadata={"team": "ab"[index % 2]})
        httpx.post(
            f"{server.url}/api/v1/agents/approval/invoke",
            json={"input": "x", "session_id": "r"},
            headers=auth(),
        )
        options = ["--url", server.url, "--api-key", KEYS["acme"]]
        team_a = runner.invoke(app, ["runs", "list", *options, "--metadata", "team:a", "--json"])
        assert team_a.exit_code == 0, team_a.output
        assert sorted(r["session_id"] for r in json.loads(team_a.stdout)) == ["c0", "c2"]
        first = runner.invoke(app, ["runs", "list", *options, "--limit", "2", "--order", "oldest"])
        assert first.exit_code == 0, first.output
        cursor = first.output.rsplit("--cursor ", 1)[1].strip()
        rest = runner.invoke(
            app, ["runs", "list", *options, "--order", "oldest", "--cursor", cursor, "--json"]
        )
        assert [r["session_id"] for r in json.loads(rest.stdout)] == ["c2", "r"]
        waiting = runner.invoke(app, ["sessions", "list", *options, "--status", "interrupted", "--json"])
        assert waiting.exit_code == 0, waiting.output
        assert [s["session_id"] for s in json.loads(waiting.stdout)] == ["r"]
        bad = runner.invoke(app, ["runs", "list", *options, "--status", "running"])
        assert bad.exit_code == 1
        assert "422" in bad.output
        local = runner.invoke(app, ["sessions", "list", "--status", "failed"])
        assert local.exit_code == 1
        assert "give --url" in local.output


def test_the_async_client_searches_and_schedules(tmp_path):
    async def use(url: str) -> None:
        async with AsyncClient(url, KEYS["acme"]) as client:
            await client.invoke("chat", "hi", "a1", metadata={"team": "x"})
            await client.invoke("chat", "hi", "a2", metadata={"team": "y"})
            page = await client.search_runs(metadata={"team": "x"})
            assert [r["session_id"] for r in page["runs"]] == ["a1"]
            assert [r["session_id"] for r in await client.runs(limit=1)] == ["a2"]
            sessions = await client.search_sessions("chat", order="oldest")
            assert [s["session_id"] for s in sessions["sessions"]] == ["a1", "a2"]
            made = await client.create_schedule("hourly", "chat", "0 * * * *", input="tick")
            assert made["source"] == "api"
            assert (await client.pause_schedule("hourly"))["paused"] is True
            run = await client.run_schedule("hourly")
            assert run.run_id
            assert [s["id"] for s in await client.schedules()] == ["daily", "hourly"]
            await client.delete_schedule("hourly")
            assert [s["id"] for s in await client.schedules()] == ["daily"]

    with Server(scheduled_config(tmp_path)) as server:
        anyio.run(use, server.url)
