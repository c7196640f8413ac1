"""A run uses its user's memory wherever it goes on: a run a schedule starts, a run woken, resumed or taken
over by another server reads and writes the memory of the user who started it (``RunRecord.memory_subject``),
not the workspace's, which a workspace-wide key reads."""

from __future__ import annotations

import contextvars

from orchestra.client import Client
from tests.server.conftest import Server
from tests.server.tenants import ADMIN_KEY, Issuer, issuer_fixture, server_fixture
from tests.server.test_memory_routes import SUPPORT

SUPPORT_AGENT = "  - {id: support, spec: support.yaml, workspace: acme}\n"

issuer = issuer_fixture()
api = server_fixture("subjects", agents=SUPPORT_AGENT, files={"support.yaml": SUPPORT})


def test_a_scheduled_run_remembers_into_its_makers_memory(api: Server, issuer: Issuer) -> None:
    """Alice's schedule, run by an admin (as the server's own ticks run it: not by alice): what its run
    remembers is alice's, not the admin's nor the workspace's."""
    admin = Client(api.url, issuer.token("dana", roles=["admin"]))
    with Client(api.url, issuer.token("alice")) as alice, Client(api.url, ADMIN_KEY) as workspace, admin:
        made = alice.create_schedule(
            "locker", "support", "0 7 * * *", input="remember my locker is 4417", paused=True
        )
        assert made["owner"] == "alice"
        run_id = admin.run_schedule("locker").run_id
        done = alice.wait(run_id, timeout=60)
        assert done["output"] == "Noted.", done
        assert [item["value"]["text"] for item in alice.memory.search(["customers"])] == ["my locker is 4417"]
        assert alice.run(run_id)["memory_subject"] == "alice"  # what a takeover or a wake goes on with
        assert admin.memory.search([]) == []
        assert workspace.memory.search([]) == []


def test_a_run_taken_over_or_woken_keeps_its_users_memory() -> None:
    """The invocation another server builds from a stored record (to take a run over, or to run it from
    its queue) uses the memory the record names."""
    from orchestra.hosting.config import HostedSpec
    from orchestra.hosting.invocation import Invocation
    from orchestra.hosting.records import RunRecord

    hosted = HostedSpec(id="support", spec="support.yaml", workspace="acme")
    record = RunRecord(
        run_id="r1",
        agent_id="support",
        kind="agent",
        mode="session",
        session_id="s1",
        started_at="2026-12-02T00:00:00+00:00",
        input="remember it",
        owner="alice",
        memory_subject="alice",
    )
    assert Invocation.of_record(hosted, record).subject == "alice"
    assert Invocation.of_record(hosted, record.model_copy(update={"memory_subject": None})).subject is None


def test_a_record_from_before_memory_subjects_keeps_the_callers_memory() -> None:
    """A run record written before ``memory_subject`` existed does not say whose memory: the run goes on
    with the caller's, as it did then (not the workspace's, which every key of it reads)."""
    from orchestra.hosting.config import HostedSpec
    from orchestra.hosting.identity import Identity, acting_as
    from orchestra.hosting.invocation import Invocation
    from orchestra.hosting.records import RunRecord

    hosted = HostedSpec(id="support", spec="support.yaml", workspace="acme")
    old = RunRecord.model_validate(
        {
            "run_id": "r0",
            "agent_id": "support",
            "kind": "agent",
            "mode": "session",
            "session_id": "s1",
            "started_at": "2026-11-01T00:00:00+00:00",
            "input": "remember it",
            "owner": "alice",
        }
    )
    assert Invocation.of_record(hosted, old).subject is None  # no caller: the server's own work
    alice = Identity("acme", "alice", via="jwt")
    assert (
        contextvars.copy_context().run(
            lambda: (acting_as(alice), Invocation.of_record(hosted, old).subject)[1]
        )
        == "alice"
    )
