"""The random fault schedules of tests/session/test_fault_schedules.py, on SQLite and PostgreSQL: an
agent's turns under faults before and after each storage call (a full disk, a refusal, a reset), one
rule: every acknowledged turn is stored exactly once, and every turn reported failed is absent from
storage or its error says it may be there. 30 schedules per database (300 with ``ORCHESTRA_STRESS=1``)."""

from __future__ import annotations

import itertools
import os
import tempfile

import anyio
import pytest
from hypothesis import HealthCheck, given, settings

from orchestra import Agent
from orchestra.errors import OrchestraError, StorageError
from orchestra.session import SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import PostgresStorage, SQLiteStorage
from orchestra.testing import Fault, FaultyStorage, ScriptedModel
from tests.session.test_fault_schedules import BUSY, SETTINGS, check_told, faults

EXAMPLES = 300 if os.environ.get("ORCHESTRA_STRESS") == "1" else 30
SESSIONS = itertools.count()


async def agent_turns(storage, schedule: list[Fault]) -> None:
    session = f"s{next(SESSIONS)}"  # one storage for every schedule: a session each
    faulty = FaultyStorage(storage)
    manager = SnapshotSessionManager(session, storage=faulty, compaction=BUSY)
    agent = await Agent.create(model=ScriptedModel([f"a{i}" for i in range(40)]), session_manager=manager)
    faulty.faults.extend(schedule)
    acked: set[str] = set()
    told: dict[str, list[bool | None]] = {}
    for turn in range(4):
        prompt = f"q{turn}"
        for _ in range(2):  # a caller retries a failed turn once
            try:
                await agent.invoke_async(prompt)
            except (StorageError, OrchestraError) as exc:
                told.setdefault(prompt, []).append(getattr(exc, "stored", False))
                continue
            acked.add(prompt)
            break
    faulty.faults.clear()
    doc = await Journal(storage, ScopeLayout(session, "agent", "default")).load()
    prompts = [m["content"][0]["text"] for m in (doc.logs["messages"] if doc else []) if m["role"] == "user"]
    for turn in range(4):
        check_told(f"q{turn}", prompts.count(f"q{turn}"), acked, told)


@pytest.fixture(scope="module")
def sqlite_storage():
    with tempfile.TemporaryDirectory() as root:
        storage = SQLiteStorage(os.path.join(root, "sessions.db"))
        yield storage
        storage.close()


@settings(
    max_examples=EXAMPLES,
    **{
        **SETTINGS,
        "suppress_health_check": [*SETTINGS["suppress_health_check"], HealthCheck.function_scoped_fixture],
    },
)
@given(schedule=faults)
def test_an_agents_turns_under_random_faults_on_sqlite(sqlite_storage, schedule):
    anyio.run(agent_turns, sqlite_storage, schedule)


@settings(
    max_examples=EXAMPLES,
    **{
        **SETTINGS,
        "suppress_health_check": [*SETTINGS["suppress_health_check"], HealthCheck.function_scoped_fixture],
    },
)
@given(schedule=faults)
def test_an_agents_turns_under_random_faults_on_postgres(postgres_storage: PostgresStorage, schedule):
    anyio.run(agent_turns, postgres_storage, schedule)
