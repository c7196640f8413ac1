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
