"""Random fault schedules, one rule: every acknowledged turn is stored exactly once, and every turn
reported failed is absent from storage or its error says it may be there.

Hypothesis plans faults (``FaultyStorage``: a full disk, a refusal, a reset, each before or after the call
takes effect) on the calls an agent, a graph and the server make; each then runs a few turns, retrying
what failed as a caller would. The oracle is a fresh load of the session from the storage without faults,
compared with what each caller was told. Two servers on one storage also get a message each, the second
while the first runs: ``enqueue`` keeps their order of arrival. ``ORCHESTRA_STRESS=1`` runs ten times as
many schedules.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra import Agent
from orchestra.errors import OrchestraError, StorageError
from orchestra.multiagent import GraphBuilder, Status
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import LocalFileStorage
from orchestra.testing import Fault, FaultyStorage, ScriptedModel

STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"
# 230 schedules in all by default: agents 80, graphs 60, the server 60, two servers 30.
AGENT_EXAMPLES, GRAPH_EXAMPLES, SERVER_EXAMPLES = (800, 600, 600) if STRESS else (80, 60, 60)
TWO_SERVER_EXAMPLES = 300 if STRESS else 30
# Compaction and folding on every save, so that housekeeping is in every schedule.
BUSY = Compaction(min_bytes=0, ratio=0.0, max_records=2, delete_after=timedelta(0))

faults = st.lists(
    st.builds(
        Fault,
        operation=st.sampled_from(["write", "write", "write", "read", "list", "delete"]),
        key_contains=st.sampled_from(
            ["/journal/", "/journal/", "snapshot_latest", "snapshot_base", "manifest", "runs/", ""]
        ),
        kind=st.sampled_from(["full", "unavailable", "reset"]),
        after=st.booleans(),
        nth=st.integers(min_value=1, max_value=8),
    ),
    max_size=6,
)

SETTINGS: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def check_told(prompt: str, count: int, acked: set[str], told: dict[str, list[bool | None]]) -> None:
    """The rule, for one prompt stored ``count`` times."""
    if prompt in acked:
        assert count == 1, f"{prompt!r} was acknowledged and is stored {count} times"
    elif all(stored is False for stored in told.get(prompt, [])):
        assert count == 0, f"{prompt!r} was reported not stored, yet is stored {count} times"
    else:
        assert count <= 1, f"{prompt!r} is stored {count} times"


@settings(max_examples=AGENT_EXAMPLES, **SETTINGS)
@given(faults)
def test_an_agents_turns_under_random_faults(schedule: list[Fault]) -> None:
    async def scenario() -> None:
        root = tempfile.mkdtemp()
        storage = FaultyStorage(LocalFileStorage(root))
        manager = SnapshotSessionManager("s1", storage=storage, compaction=BUSY)
        agent = await Agent.create(model=ScriptedModel([f"a{i}" for i in range(40)]), session_manager=manager)
        storage.faults.extend(schedule)
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
        storage.faults.clear()
        doc = await Journal(LocalFileStorage(root), ScopeLayout("s1", "agent", "default")).load()
        prompts = [
            m["content"][0]["text"] for m in (doc.logs["messages"] if doc else []) if m["role"] == "user"
        ]
        for turn in range(4):
            check_told(f"q{turn}", prompts.count(f"q{turn}"), acked, told)

    anyio.run(scenario)


@settings(max_examples=GRAPH_EXAMPLES, **SETTINGS)
@given(faults)
def test_a_graphs_run_under_random_faults(schedule: list[Fault]) -> None:
    """A run acknowledged as completed is stored completed, every node once in its execution order."""

    async def scenario() -> None:
        root = tempfile.mkdtemp()
        storage = FaultyStorage(LocalFileStorage(root))
        builder = GraphBuilder().set_graph_id("pipe")
        for name in ("a", "b", "c"):
            builder.add_node(lambda task, _n=name: f"{_n} done", node_id=name)
        builder.add_edge("a", "b").add_edge("b", "c")
        builder.set_session_manager(SnapshotSessionManager("s1", storage=storage, compaction=BUSY))
        graph = builder.build()
        storage.faults.extend(schedule)
        completed = False
        for attempt in range(4):  # the caller invokes again (a resume) after a failure
            try:
                result = await graph.invoke_async("go" if attempt == 0 else None)
            except (StorageError, OrchestraError):
                continue
            completed = result.status == Status.COMPLETED
            if completed:
                break
        storage.faults.clear()
        doc = await Journal(LocalFileStorage(root), ScopeLayout("s1", "multiAgent", "pipe")).load()
        if completed:
            assert doc is not None
            assert doc.fields["run"]["status"] == Status.COMPLETED.value
            order = doc.logs["execution_order"]
            assert sorted(order) == ["a", "b", "c"], f"stored execution order {order}"

    anyio.run(scenario)


@settings(max_examples=SERVER_EXAMPLES, **SETTINGS)
@given(faults)
def test_hosted_turns_under_random_faults(schedule: list[Fault]) -> None:
    """A client sends each turn with an Idempotency-Key and repeats it while the answer says it may be
    repeated: a 200 is stored once (with a completed run record), anything else at most once, and not at
    all when every answer said nothing was stored."""
    from orchestra.server import create_app, load_config
    from tests.server.conftest import KEYS, write_config

    not_stored = {"storage_full", "storage_unavailable", "session_conflict"}

    async def scenario() -> None:
        from pathlib import Path

        root = Path(tempfile.mkdtemp())
        app = create_app(load_config(write_config(root, f"file:{root}/store")))
        runtime = app.state.runtime
        runtime.root = storage = FaultyStorage(runtime.root)
        storage.faults.extend(schedule)
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEYS['acme']}"}
        acked: dict[str, str] = {}
        told: dict[str, list[bool | None]] = {}
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as http:
            for turn in range(3):
                prompt = f"q{turn}"
                for _ in range(4):
                    answer = await http.post(
                        "/api/v1/agents/chat/invoke",
                        json={"input": prompt, "session_id": "s1"},
                        headers={"Idempotency-Key": f"key-{turn}"},
                    )
                    if answer.status_code == 200:
                        acked[prompt] = answer.json()["run_id"]
                        break
                    code = answer.json()["error"]["code"]
                    told.setdefault(prompt, []).append(False if code in not_stored else None)
            storage.faults.clear()
            await runtime.flush_records("acme")
            for run_id in acked.values():
                record = await http.get(f"/api/v1/runs/{run_id}")
                assert record.json()["status"] == "completed"
        sessions = runtime.agent_storage("acme", "chat")
        doc = await Journal(sessions, ScopeLayout("s1", "agent", "default")).load()
        prompts = [
            m["content"][0]["text"] for m in (doc.logs["messages"] if doc else []) if m["role"] == "user"
        ]
        for turn in range(3):
            check_told(f"q{turn}", prompts.count(f"q{turn}"), set(acked), told)

    anyio.run(scenario)


@settings(max_examples=TWO_SERVER_EXAMPLES, **SETTINGS)
@given(faults, faults)
def test_enqueue_order_across_two_servers_under_random_faults(
    schedule_a: list[Fault], schedule_b: list[Fault]
) -> None:
    """``x1`` goes to server A and its model waits; ``x2`` goes to server B meanwhile; each is repeated
    with its Idempotency-Key while the answer says it may be. The rule holds for both, and when ``x1``'s
    first request was answered 200, its model ran once and it is stored before ``x2``: an ``enqueue``
    message to another server waits for the run that has the session (it used to be stored first, the
    earlier turn losing its session and running again after it)."""
    from orchestra.server import create_app, load_config
    from tests.server.conftest import KEYS, write_config

    not_stored = {"storage_full", "storage_unavailable", "session_conflict"}
    runs = (
        "runs: {on_busy: enqueue, heartbeat_s: 0.05, server_gone_after_s: 10, poll_s: 0.02, sweep_s: 0.05}\n"
    )

    async def scenario(root: Path) -> None:
        config = write_config(root, f"file:{root}/store", runs)
        spec = root / "chat.yaml"
        spec.write_text(
            spec.read_text().replace("tests.support:echo_reply", "tests.server.agents:counted_echo")
        )
        calls, gate = root / "calls.txt", root / "gate"
        apps = [create_app(load_config(config)) for _ in range(2)]
        storages = []
        for app, schedule in zip(apps, (schedule_a, schedule_b), strict=True):
            app.state.runtime.root = storage = FaultyStorage(app.state.runtime.root)
            storage.faults.extend(schedule)
            storages.append(storage)
        answers: dict[str, list[httpx.Response]] = {"slow x1": [], "x2": []}
        headers = {"Authorization": f"Bearer {KEYS['acme']}"}

        async def send(http: httpx.AsyncClient, prompt: str) -> None:
            for _ in range(4):
                body = {"input": prompt, "session_id": "s1"}
                answer = await http.post(
                    "/api/v1/agents/chat/invoke", json=body, headers={"Idempotency-Key": prompt}
                )
                answers[prompt].append(answer)
                if answer.status_code == 200:
                    return

        def called() -> list[str]:
            return calls.read_text().splitlines() if calls.exists() else []

        async with AsyncExitStack() as stack:
            a, b = [
                await stack.enter_async_context(
                    httpx.AsyncClient(
                        transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers
                    )
                )
                for app in apps
            ]
            for app in apps:
                await stack.enter_async_context(app.router.lifespan_context(app))
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(send, a, "slow x1")
                for _ in range(4000):  # until x1's model runs, or its attempts were all answered
                    if "slow x1" in called() or len(answers["slow x1"]) == 4:
                        break
                    await anyio.sleep(0.005)
                tasks.start_soon(send, b, "x2")
                await anyio.sleep(0.05)  # x2 reaches B while x1 runs
                gate.touch()
        for storage in storages:
            storage.faults.clear()
        runtime = apps[0].state.runtime
        doc = await Journal(
            runtime.agent_storage("acme", "chat"), ScopeLayout("s1", "agent", "default")
        ).load()
        prompts = [
            m["content"][0]["text"] for m in (doc.logs["messages"] if doc else []) if m["role"] == "user"
        ]
        acked = {p for p, told in answers.items() if told and told[-1].status_code == 200}
        told = {
            p: [
                False if r.json()["error"]["code"] in not_stored else None
                for r in replies
                if r.status_code != 200
            ]
            for p, replies in answers.items()
        }
        for prompt in answers:
            check_told(prompt, prompts.count(prompt), acked, told)
        if answers["slow x1"][0].status_code == 200:
            assert called().count("slow x1") == 1, called()
            if "x2" in prompts:
                assert prompts.index("slow x1") < prompts.index("x2"), prompts

    root = Path(tempfile.mkdtemp())
    previous = {name: os.environ.get(name) for name in ("ORCHESTRA_TEST_CALLS", "ORCHESTRA_TEST_GATE")}
    os.environ["ORCHESTRA_TEST_CALLS"] = str(root / "calls.txt")
    os.environ["ORCHESTRA_TEST_GATE"] = str(root / "gate")
    try:
        anyio.run(scenario, root)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
