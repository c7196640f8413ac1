"""The audit log (issue 38 item 4): who created, answered, cancelled, resumed or deleted what, in storage;
``GET /api/v1/audit`` for admins and ``orchestra audit``, filtered; kept as long as the config says."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import pytest

from orchestra.errors import StorageConflictError
from orchestra.hosting.audit import AuditLog
from orchestra.storage import ABSENT, InMemoryStorage
from tests.server.conftest import Server, auth
from tests.server.tenants import Issuer, bearer, issuer_fixture, write_tenant_config

issuer = issuer_fixture()


def test_who_did_what_is_logged_and_read_back_filtered(tmp_path, issuer: Issuer) -> None:
    config = write_tenant_config(
        tmp_path, f"file:{tmp_path}/store", issuer.url, "audit: {enabled: true, retention_days: 30}\n"
    )
    alice = bearer(issuer.token("alice"))
    with Server(config) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        first = http.post(
            "/api/v1/agents/chat/invoke", json={"input": "hi", "session_id": "s1"}, headers=alice
        ).json()
        asked = http.post(
            "/api/v1/agents/approval/invoke", json={"input": "ship", "session_id": "p1"}, headers=alice
        ).json()
        answer = [{"interrupt_id": asked["interrupts"][0]["id"], "response": "yes"}]
        answered = http.post(
            "/api/v1/agents/approval/invoke", json={"session_id": "p1", "responses": answer}, headers=alice
        )
        assert answered.status_code == 200, answered.text
        assert http.delete("/api/v1/agents/chat/sessions/s1", headers=alice).status_code == 204
        schedule = {"id": "daily", "agent": "chat", "cron": "0 7 * * *", "paused": True}
        assert http.post("/api/v1/schedules", json=schedule, headers=alice).status_code == 201
        for action in ("resume", "pause"):
            assert http.post(f"/api/v1/schedules/daily/{action}", headers=alice).status_code == 200
        ran = http.post("/api/v1/schedules/daily/run", headers=alice)
        assert ran.status_code == 202, ran.text
        assert http.delete("/api/v1/schedules/daily", headers=alice).status_code == 204

        refused = http.get("/api/v1/audit", headers=bearer(issuer.token("bob")))
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "admin_only"

        entries = http.get("/api/v1/audit", headers=auth()).json()["entries"]
        assert [(e["action"], e["user"], e.get("session_id")) for e in entries] == [
            ("run.create", "alice", "s1"),
            ("run.create", "alice", "p1"),
            ("interrupt.answer", "alice", "p1"),
            ("session.delete", "alice", "s1"),
            ("schedule.create", "alice", None),
            ("schedule.resume", "alice", None),
            ("schedule.pause", "alice", None),
            ("schedule.run", "alice", ran.json()["session_id"]),
            ("schedule.delete", "alice", None),
        ]
        assert [e.get("schedule_id") for e in entries[-5:]] == ["daily"] * 5
        assert entries[-2]["run_id"] == ran.json()["run_id"]
        assert entries[0]["run_id"] == first["run_id"]
        assert entries[0]["via"] == "jwt"
        deleted = http.get("/api/v1/audit", params={"action": "session.delete"}, headers=auth()).json()
        assert [e["session_id"] for e in deleted["entries"]] == ["s1"]
        later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        assert http.get("/api/v1/audit", params={"since": later}, headers=auth()).json()["entries"] == []
        assert http.get("/api/v1/audit", params={"user": "bob"}, headers=auth()).json()["entries"] == []

    printed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from orchestra.cli import main; main()",
            "audit",
            str(config),
            "-w",
            "acme",
            "--action",
            "interrupt.answer",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert [json.loads(line)["session_id"] for line in printed] == ["p1"]


def test_days_older_than_the_retention_go_and_entries_are_never_rewritten() -> None:
    async def main() -> None:
        storage = InMemoryStorage()
        log = AuditLog(storage)
        await log.record("run.create", agent_id="chat", run_id="r-now")
        old = datetime.now(UTC) - timedelta(days=40)
        await storage.write(f"audit/{old:%Y-%m-%d}/0001.json", json.dumps({"at": old.isoformat()}).encode())
        assert await log.prune(30) == 1
        remaining = await log.entries()
        assert [e["run_id"] for e in remaining] == ["r-now"]
        (key,) = await storage.list("audit/")
        with pytest.raises(StorageConflictError):  # what AuditLog.record writes: create-only
            await storage.write(key, b"{}", expect=ABSENT)

    anyio.run(main)
