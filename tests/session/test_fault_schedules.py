"""Random fault schedules, one rule: every acknowledged turn is stored exactly once, and every turn
reported failed is absent from storage or its error says it may be there.

Hypothesis plans faults (``FaultyStorage``: a full disk, a refusal, a reset, each before or after the call
takes effect) on the calls an agent, a graph and the server make; each then runs a few turns, retrying
what failed as a caller would. The oracle is a fresh load of the session from the storage without faults,
compared with what each caller was told. Two servers on one storage also get a message each, the second
while the first runs: ``enqueue`` keeps their order of arrival. ``ORCHESTRA_STRESS=1`` runs ten times as
many schedules.

Two schedules also SIGKILL processes (forked, at a write hypothesis picks, or inside a side-effecting
tool): an agent whose next process sends a new prompt after a killed turn (issue 35 item 8), and a
server whose client repeats a turn with its Idempotency-Key after a kill (item 9).

The agent and graph schedules, and the killed agent's, run with the journal's records as files and as
appends to segments (local files' own way, issue 33 item 5); a kill may also leave half an append.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
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
from orchestra.history import history_problems
from orchestra.multiagent import GraphBuilder, Status
from orchestra.session import Compaction, SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import LocalFileStorage
from orchestra.testing import Fault, FaultyStorage, FunctionModel, ScriptedModel
from tests.agent.test_exactly_once_tools import KillAt, effect_tools, planner
from tests.effects_service import EffectService
from tests.server.conftest import KEYS

STRESS = os.environ.get("ORCHESTRA_STRESS") == "1"
# 230 schedules in all by default: agents 80, graphs 60, the server 60, two servers 30.
AGENT_EXAMPLES, GRAPH_EXAMPLES, SERVER_EXAMPLES = (800, 600, 600) if STRESS else (80, 60, 60)
TWO_SERVER_EXAMPLES = 300 if STRESS else 30
# Compaction and folding on every save, so that housekeeping is in every schedule.
BUSY = Compaction(min_bytes=0, ratio=0.0, max_records=2, delete_after=timedelta(0))

faults = st.lists(
    st.builds(
        Fault,
        operation=st.sampled_from(["write", "write", "write", "append", "read", "list", "delete"]),
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
@given(faults, st.booleans())
def test_an_agents_turns_under_random_faults(schedule: list[Fault], appends: bool) -> None:
    """With ``appends`` the records are appended to segments (local files' default), else one file each."""

    async def scenario() -> None:
        root = tempfile.mkdtemp()
        storage = FaultyStorage(LocalFileStorage(root), appends=appends)
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
@given(faults, st.booleans())
def test_a_graphs_run_under_random_faults(schedule: list[Fault], appends: bool) -> None:
    """A run acknowledged as completed is stored completed, every node once in its execution order (its
    records appended to segments with ``appends``, else one file each)."""

    async def scenario() -> None:
        root = tempfile.mkdtemp()
        storage = FaultyStorage(LocalFileStorage(root), appends=appends)
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


# -- processes killed at random points (issue 35 items 8 and 9) ---------------------------------------

KILL_EXAMPLES = 300 if STRESS else 20
kills = st.lists(st.tuples(st.integers(min_value=1, max_value=14), st.booleans()), min_size=1, max_size=3)


def run_processes(target: Any, args: tuple[Any, ...], schedule: list[tuple[int, bool]]) -> None:
    """``target(*args, index, at, after)`` in a forked process per kill point, then once without one."""
    context = multiprocessing.get_context("fork")  # no re-import: a few ms a process
    for index, (at, after) in enumerate([*schedule, (10**6, False)]):
        process = context.Process(target=target, args=(*args, index, at, after))
        process.start()
        process.join(120)
        assert process.exitcode in (0, -signal.SIGKILL), f"the worker failed (exit {process.exitcode})"


class KillAtAppends(KillAt):
    """``KillAt`` over a storage that appends (a journal's records on local files): an append counts as a
    write. With ``torn``, a kill before an append first appends half of it, as a process killed in the
    middle of writing a record leaves it."""

    appends = True

    def __init__(self, inner: Any, at: int, after: bool, *, torn: bool) -> None:
        super().__init__(inner, at, after)
        self.torn = torn

    async def append(self, key: str, data: bytes, *, at: int, tail: bytes = b"") -> int:
        self.writes += 1
        if self.writes == self.at and not self.after:
            if self.torn and len(data) > 1:
                await self.inner.append(key, data[: len(data) // 2], at=at, tail=tail)
            os.kill(os.getpid(), signal.SIGKILL)
        length = int(await self.inner.append(key, data, at=at, tail=tail))
        if self.writes == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return length

    async def read_from(self, key: str, offset: int) -> bytes | None:
        found: bytes | None = await self.inner.read_from(key, offset)
        return found


def killing(storage: Any, at: int, after: bool, records: str) -> KillAt:
    """``KillAt`` for ``records`` stored as "files" (one a record), as "appends" to segments, or as
    "torn appends" (a kill before an append leaves half of it)."""
    if records == "files":
        return KillAt(storage, at, after)
    return KillAtAppends(storage, at, after, torn=records == "torn appends")


def told_of(exc: BaseException) -> bool | None:
    """What an error says of its turn: stored, not stored, or perhaps (a turn kept open is there)."""
    if any("kept open" in note for note in getattr(exc, "__notes__", ())):
        return None
    return getattr(exc, "stored", False)


def new_prompt_worker(
    root: str, url: str, planned: list[Fault], out: str, records: str, index: int, at: int, after: bool
) -> None:
    """One process: the session's next prompt, a new one (a killed one is not sent again), retried once
    if it fails, as a caller would; each outcome is written to ``out`` as it comes. ``records``: see
    ``killing``."""

    async def main() -> None:
        local = LocalFileStorage(root, durable=False)  # a kill keeps the page cache
        faulty = FaultyStorage(local, appends=records != "files")
        faulty.faults.extend(planned)
        prompt = f"turn-{index}"
        with open(out, "a") as told:  # noqa: ASYNC230 (one line per outcome, before the next kill)
            for _ in range(2):
                storage = killing(faulty, at, after, records)
                manager = SnapshotSessionManager("s", storage=storage, compaction=BUSY)
                told.write(json.dumps([prompt, "try"]) + "\n")  # a kill leaves it without an outcome
                told.flush()
                try:
                    agent = await Agent.create(
                        model=FunctionModel(planner), tools=effect_tools(url), session_manager=manager
                    )
                    await agent.invoke_async(prompt)
                except (StorageError, OrchestraError) as exc:
                    told.write(json.dumps([prompt, told_of(exc)]) + "\n")
                    told.flush()
                    continue
                told.write(json.dumps([prompt, "acked"]) + "\n")
                return

    anyio.run(main)


@settings(max_examples=KILL_EXAMPLES, **SETTINGS)
@given(kills, faults, st.sampled_from(["files", "appends", "torn appends"]))
def test_a_new_prompt_after_a_killed_turn(
    schedule: list[tuple[int, bool]], planned: list[Fault], records: str
) -> None:
    """Each process sends a new prompt to a session whose last turn a kill (or a fault) may have left
    open: that turn is finished first. The session always loads, its history keeps every rule, each
    acknowledged prompt is stored once, and each side effect ran once, with its turn in the history.
    The journal's records are files, appends to segments, or appends a kill may leave half written."""
    with EffectService() as service:
        root = tempfile.mkdtemp()
        out = os.path.join(root, "told.jsonl")
        run_processes(new_prompt_worker, (root, service.url, planned, out, records), schedule)
        final = Agent(
            model=FunctionModel(planner),
            tools=effect_tools(service.url),
            session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(root)),
        )
        if final.open_turn() is not None:  # the last process's turn failed after a side effect: finish it
            final()
        assert history_problems(final.messages) == []
        acked: set[str] = set()
        told: dict[str, list[bool | None]] = {}
        trying: set[str] = set()
        with open(out) as lines:
            for line in lines:
                prompt, outcome = json.loads(line)
                if outcome == "try":
                    trying.add(prompt)
                    continue
                trying.discard(prompt)
                if outcome == "acked":
                    acked.add(prompt)
                else:
                    told.setdefault(prompt, []).append(outcome)
        for prompt in trying:  # its process was killed: it may be stored (once at most)
            told.setdefault(prompt, []).append(None)
        prompts = [m["content"][0].get("text") for m in final.messages if m["role"] == "user"]
        for prompt in {*acked, *told}:
            check_told(prompt, prompts.count(prompt), acked, told)
        sent = sorted(
            b["toolResult"]["content"][0]["text"]
            for m in final.messages
            for b in m["content"]
            if "toolResult" in b and not b["toolResult"]["content"][0]["text"].startswith("found ")
        )
        assert all(count == 1 for count in service.effects.values()), dict(service.effects)
        assert sorted(service.effects) == sent, "an effect ran without its turn, or a turn's effect did not"


HOSTED_TURNS = 2


def key_retry_worker(root: str, out: str, die_in_tool: bool, index: int, at: int, after: bool) -> None:
    """One server process (the app in process, over ASGI) and its client: each turn is sent with its
    Idempotency-Key and repeated while the answer says to, until 200; killed at its ``at``-th write, or
    inside the side-effecting tool (the first process, when ``die_in_tool``)."""
    from pathlib import Path

    from orchestra.server import create_app, load_config

    os.environ["ORCHESTRA_TEST_LEDGER"] = os.path.join(root, "ledger.txt")
    os.environ["ORCHESTRA_TEST_DIE"] = os.path.join(root, "die")
    if die_in_tool and index == 0:
        Path(root, "die").write_text("")
    elif Path(root, "die").exists():
        Path(root, "die").unlink()

    async def main() -> None:
        app = create_app(load_config(Path(root) / "platform.yaml"))
        runtime = app.state.runtime
        runtime.root = KillAt(runtime.root, at, after)
        headers = {"Authorization": f"Bearer {KEYS['acme']}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as http:
            for turn in range(HOSTED_TURNS):
                for _ in range(200):
                    answer = await http.post(
                        "/api/v1/agents/transfer/invoke",
                        json={"input": f"transfer {turn}", "session_id": "s"},
                        headers={"Idempotency-Key": f"key-{turn}"},
                    )
                    if answer.status_code == 200:
                        break
                    assert answer.status_code in (409, 503), answer.text  # retryable, as the client does
                    await anyio.sleep(0.02)
                with open(out, "a") as told:  # noqa: ASYNC230
                    told.write(json.dumps([turn, answer.status_code, answer.json()]) + "\n")

    anyio.run(main)


@settings(max_examples=max(8, KILL_EXAMPLES // 2), **SETTINGS)  # a server process costs 0.5 s
@given(kills, st.booleans())
def test_a_key_retry_after_a_kill_inside_a_tool(schedule: list[tuple[int, bool]], die_in_tool: bool) -> None:
    """A server process dies at a write, or inside a side-effecting tool; the next one gets the turn
    repeated with its Idempotency-Key (issue 35 item 9). Every 200 is the turn's real answer (never a
    ``completed`` the turn did not give), the session ends with each turn once and closed, and each
    transfer was carried out once (one key each)."""
    from pathlib import Path

    from orchestra.server import create_app, load_config
    from tests.server.test_open_turns import transfer_config

    root = tempfile.mkdtemp()
    config = transfer_config(Path(root), runs="runs: {server_gone_after_s: 0.05}\n")
    out = os.path.join(root, "told.jsonl")
    create_app(load_config(config))  # its imports (the protocol doors) are done once, not in every fork
    run_processes(key_retry_worker, (root, out, die_in_tool), schedule)
    with open(out) as lines:
        for line in lines:
            turn, status, body = json.loads(line)
            assert status == 200, body
            assert (body["status"], body["output"]) == ("completed", f"done: transfer {turn}"), body
    sessions = LocalFileStorage(os.path.join(root, "store", "ws", "acme", "agents", "transfer"))
    doc = anyio.run(Journal(sessions, ScopeLayout("s", "agent", "default")).load)
    assert doc is not None
    texts = [next((b["text"] for b in m["content"] if "text" in b), None) for m in doc.logs["messages"]]
    expected = [[f"transfer {t}", None, None, f"done: transfer {t}"] for t in range(HOSTED_TURNS)]
    assert texts == [text for turn in expected for text in turn]
    ledger = Path(root, "ledger.txt").read_text().split("\n") if Path(root, "ledger.txt").exists() else []
    assert len({line.split()[0] for line in ledger if line}) == HOSTED_TURNS


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
