"""The sample config in docs/server.md is a file that works: served for real, the doc's curl answers."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.server.conftest import Server

ROOT = Path(__file__).parent.parent.parent
SAMPLE = ROOT / "examples" / "server" / "server.yaml"


def test_docs_show_the_sample_config_verbatim() -> None:
    assert SAMPLE.read_text() in (ROOT / "docs" / "server.md").read_text()


def test_the_sample_config_answers_the_documented_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # its file: storage is relative to where the server runs
    with Server(SAMPLE) as server:
        reply = httpx.post(
            f"{server.url}/api/v1/agents/assistant/invoke",
            headers={"Authorization": "Bearer my-secret-key"},
            json={"input": {"message": "What is the weather?"}, "session_id": "user-123"},
            timeout=30,
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["session_id"] == "user-123"
    assert "What is the weather?" in reply.json()["output"]


def client_block() -> str:
    """The Python block of docs/server.md's "Client" section, as a reader would paste it."""
    section = (ROOT / "docs" / "server.md").read_text().split("\n## Client\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_client_block_runs_twice_in_a_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35, item 27: pasted twice against the sample server, the block runs both times (it used a
    name it never defined, other_run_id)."""
    monkeypatch.chdir(tmp_path)
    block = client_block()
    assert "http://127.0.0.1:8000" in block
    with Server(SAMPLE) as server:
        for _ in range(2):
            namespace: dict[str, object] = {}
            exec(compile(block.replace("http://127.0.0.1:8000", server.url), "server.md", "exec"), namespace)
            assert namespace["follow_up"].output.endswith("What about Paris?")  # type: ignore[attr-defined]
            assert namespace["done"].status == "completed"  # type: ignore[attr-defined]


def test_the_approval_example_survives_a_restart_and_is_answered_with_the_client(tmp_path: Path) -> None:
    """examples/server/approval.yaml as docs/server.md walks through it: start the release over HTTP,
    restart the server, answer the approval with the client, see the run complete."""
    import os
    import subprocess
    import sys
    import time

    from orchestra.client import Client
    from tests.server.test_concurrency import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}

    def serve() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from orchestra.cli import main; main()",
                "serve",
                str(SAMPLE),
                "--port",
                str(port),
            ],
            cwd=tmp_path,  # the sample's storage, file:./.orchestra-server, is relative to where it runs
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/openapi.json", timeout=1)
                return process
            except httpx.TransportError:
                time.sleep(0.1)
        process.kill()
        raise RuntimeError("the sample server did not start")

    server = serve()
    try:
        with Client(url, "my-secret-key") as client:
            run = client.start_run("release", "Release 2.4", session_id="rel-2.4")
            waiting = client.wait(run.run_id, timeout=60)
        assert waiting["status"] == "interrupted"
        [question] = waiting["interrupts"]
        assert (question["name"], question["node"]) == ("approval", "approve")
        assert question["reason"]["question"] == "Publish these notes?"
    finally:
        server.terminate()
        server.wait(30)
    server = serve()  # a restart: only the storage remains
    try:
        with Client(url, "my-secret-key") as client:
            done = client.respond("release", {question["id"]: "approved"}, session_id="rel-2.4")
            assert done.status == "completed"
            assert (
                done.output
                == "published: Release notes: saves are faster, and the dashboard answers approvals."
            )
            assert client.run(done.run_id)["nodes"]["publish"]["status"] == "completed"
    finally:
        server.terminate()
        server.wait(30)
