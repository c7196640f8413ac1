"""A damaged session is neither absent nor written over (issue 35 item 12): a byte changed in its files
makes the session's GET and its next message answer 500 ``session_damaged``, and nothing of it is
rewritten, so that what the files still hold can be repaired. Through real HTTP, a server that kept the
session's agent from its earlier turns."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.server.conftest import Server, auth, write_config

SCOPE = "store/ws/acme/agents/chat/session/s1/scopes/agent/default"


def session_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / "store").rglob("*"))
        if p.is_file() and "/session/s1/" in str(p) and p.name != ".lock"
    }


@pytest.mark.parametrize(
    ("damaged", "find"),
    [
        ("snapshots/snapshot_latest.json", b"{"),  # no longer JSON: taken for an absent session
        # a message's text, in its record's line of the journal's segment: loaded as something else
        ("journal/000000000000.json", b"two"),
    ],
)
def test_a_damaged_session_answers_session_damaged_and_is_not_written_over(tmp_path, damaged, find):
    config = write_config(tmp_path, f"file:{tmp_path}/store")
    with Server(config) as server, httpx.Client(base_url=server.url, headers=auth(), timeout=30) as client:
        for text in ("one", "two"):
            sent = client.post("/api/v1/agents/chat/invoke", json={"input": text, "session_id": "s1"})
            assert sent.status_code == 200, sent.text
        path = tmp_path / SCOPE / damaged
        data = bytearray(path.read_bytes())
        data[data.index(find)] ^= 0x01
        path.write_bytes(bytes(data))
        before = session_files(tmp_path)

        shown = client.get("/api/v1/agents/chat/sessions/s1")
        assert (shown.status_code, shown.json()["error"]["code"]) == (500, "session_damaged"), shown.text
        for _ in range(2):
            sent = client.post("/api/v1/agents/chat/invoke", json={"input": "three", "session_id": "s1"})
            assert (sent.status_code, sent.json()["error"]["code"]) == (500, "session_damaged"), sent.text
        assert session_files(tmp_path) == before  # nothing written over, nothing added
