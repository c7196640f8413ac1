"""Temporal failure paths: parallel state writes merge as locally, the spec's state reaches every node, and
a node's own timeout is final (one execution, the local message)."""

from __future__ import annotations

import json

import pytest

from orchestra import load
from orchestra.session.admin import load_scope
from orchestra.spec import parse_text
from orchestra.storage import storage_from_uri
from tests.temporal.test_temporal import run_on

pytestmark = pytest.mark.timeout(300)

PARALLEL_STATE = """version: 1
kind: graph
id: parallel-state
input: go
state: {greeting: hello, temp: scratch}
nodes:
  - {id: start, function: 'tests.support:report_state'}
  - {id: a, function: 'tests.support:set_own_key'}
  - {id: b, function: 'tests.support:set_own_key'}
  - {id: c, function: 'tests.support:set_own_key'}
  - {id: cleaner, function: 'tests.support:delete_temp'}
  - {id: report, function: 'tests.support:report_state'}
edges:
  - {from: start, to: a}
  - {from: start, to: b}
  - {from: start, to: c}
  - {from: start, to: cleaner}
  - {from: a, to: report}
  - {from: b, to: report}
  - {from: c, to: report}
  - {from: cleaner, to: report}
"""

TIMEOUT = """version: 1
kind: graph
id: slow
input: go
nodes:
  - {id: slow, function: 'tests.support:sleep_forever'}
limits: {node_timeout: 2}
"""


async def test_parallel_state_writes_and_the_initial_state_match_a_local_run(temporal_address, tmp_path):
    loaded = parse_text(PARALLEL_STATE, "parallel_state.yaml")
    storage = f"file:{tmp_path}/store"
    summary, _ = await run_on(temporal_address, "q-state", loaded, storage, "s1", "go")
    assert summary["status"] == "completed"
    (tmp_path / "parallel_state.yaml").write_text(PARALLEL_STATE)
    local = await load(tmp_path / "parallel_state.yaml").invoke_async("go")

    doc = await load_scope(storage_from_uri(storage), "s1", "multiAgent", "parallel-state")
    outputs = {
        n[len("node/") :]: r["result"]["output"] for n, r in doc.fields.items() if n.startswith("node/")
    }
    assert outputs["start"] == local.results["start"].output == '{"greeting": "hello", "temp": "scratch"}'
    assert outputs["report"] == local.results["report"].output
    assert doc.fields["state"] == {"greeting": "hello", "a": "set by a", "b": "set by b", "c": "set by c"}


async def test_a_node_timeout_is_final_not_retried(temporal_address, tmp_path, monkeypatch):
    counts = tmp_path / "executions.txt"
    monkeypatch.setenv("ORCHESTRA_TEST_COUNT_FILE", str(counts))
    loaded = parse_text(TIMEOUT, "slow.yaml")
    summary, _ = await run_on(temporal_address, "q-timeout", loaded, f"file:{tmp_path}/store", "s1", "go")
    assert summary["status"] == "failed"
    assert "node_timeout (2s) exceeded by node 'slow'" in (summary["reason"] or summary["error"] or "")
    assert counts.read_text().count("ran") == 1


async def test_a_pipeline_sets_its_retry_policy_and_heartbeat():
    from datetime import timedelta

    from orchestra.multiagent import Graph, RetryPolicy
    from orchestra.temporal.activities import PipelineActivities
    from orchestra.temporal.workflow import PipelineWorkflow

    loaded = parse_text(
        TIMEOUT + "temporal: {retry: {maximum_attempts: 2, initial_interval: 1.5}, heartbeat_seconds: 3}\n",
        "slow.yaml",
    )
    structure = await PipelineActivities({"slow": loaded}).describe("slow")
    assert structure["temporal"]["heartbeat_seconds"] == 3
    workflow = PipelineWorkflow()
    workflow._settings = structure["temporal"]
    skeleton = Graph.from_structure(structure)
    policy = workflow._node_retries(skeleton, "slow")
    assert (policy.maximum_attempts, policy.initial_interval) == (2, timedelta(seconds=1.5))
    workflow._settings = {}  # a run recorded before the setting existed keeps the default
    assert workflow._node_retries(skeleton, "slow").maximum_attempts == 5
    # A node's own retry policy: its intervals, its attempts on top of the infrastructure's.
    skeleton.nodes["slow"].retry = RetryPolicy(
        max_attempts=4, initial_interval=0.5, backoff=3, max_interval=9
    )
    own = workflow._node_retries(skeleton, "slow")
    assert (own.maximum_attempts, own.initial_interval, own.backoff_coefficient, own.maximum_interval) == (
        8,
        timedelta(seconds=0.5),
        3,
        timedelta(seconds=9),
    )
    with pytest.raises(Exception, match="maximum_attempts"):
        parse_text(TIMEOUT + "temporal: {retry: {maximum_attempts: 0}}\n", "bad.yaml")


async def test_a_5_mb_task_and_10_kb_outputs_stay_out_of_the_history(temporal_address, tmp_path):
    chain = "".join(f"  - {{id: n{i}, function: 'tests.support:ten_kb_output'}}\n" for i in range(10))
    edges = "".join(f"  - {{from: n{i}, to: n{i + 1}}}\n" for i in range(9))
    loaded = parse_text(f"version: 1\nkind: graph\nid: chain\nnodes:\n{chain}edges:\n{edges}", "chain.yaml")
    task = "x" * 5_000_000
    store = tmp_path / "store"
    summary, client = await run_on(
        temporal_address,
        "q-big-task",
        loaded,
        f"file:{store}",
        "s1",
        task,
        invocation_state={"k": "v" * 1000},
    )
    assert summary["status"] == "completed", summary
    history = await client.get_workflow_handle("orchestra-chain-s1").fetch_history()
    size = len(history.to_json())
    print("history bytes", size)
    assert size < 100_000, size  # keys, statuses and usage only (a 200 KB task made 3.0 MB before)
    doc = await load_scope(storage_from_uri(f"file:{store}"), "s1", "multiAgent", "chain")
    assert doc.fields["task"] == task
    assert doc.fields["node/n9"]["result"]["output"] == "n9 saw k=" + "v" * 1000 + " " + "o" * 10_000
    # Every node's blob, and the task's, were deleted once committed; the invocation state once the run ended.
    left = sorted(
        p.name
        for p in store.rglob("*")
        if "temporal" in p.parts and p.is_file() and not p.name.startswith(".")
    )
    assert left == [], left


async def test_a_commit_after_another_workers_commit_reloads_the_journal(tmp_path):
    """A worker keeps a run's journal between commits; when another worker committed meanwhile (the
    workflow moved), its save is refused, and it loads the journal again instead of losing that commit."""
    from orchestra.session._journal import Journal
    from orchestra.session._layout import ScopeLayout
    from orchestra.temporal import CommitRequest, PipelineActivities

    storage = f"file:{tmp_path}/store"
    first, second = PipelineActivities({}), PipelineActivities({})

    def commit(value: str) -> CommitRequest:
        return CommitRequest("s1", storage, "chain", {"run": {"run_id": "r1"}, value: value}, {})

    await first.commit(commit("a"))
    await second.commit(commit("b"))  # the workflow moved to another worker
    await first.commit(commit("c"))  # and back: the first worker's journal is stale
    doc = await Journal(storage_from_uri(storage), ScopeLayout("s1", "multiAgent", "chain")).load()
    assert doc is not None
    assert {k: doc.fields.get(k) for k in "abc"} == {"a": "a", "b": "b", "c": "c"}


async def test_a_commit_retried_after_it_deleted_its_inputs_keeps_what_it_saved(tmp_path):
    """A worker can die after a commit saved the journal and deleted the node's blob and the task's, but
    before Temporal recorded the commit: the retry (on another worker) finds the inputs gone and must
    keep what the journal holds. Inputs missing for a commit that never happened are an error."""
    import json

    from orchestra.multiagent import NodeResult, Status
    from orchestra.temporal import CommitRequest, PipelineActivities
    from orchestra.temporal.activities import input_key

    uri = f"file:{tmp_path}/store"
    storage = storage_from_uri(uri)
    task_key = input_key("s1", "chain", "r1", "task")
    await storage.write(task_key, b'"the task"')
    run = {"run_id": "r1", "status": "executing"}
    first = CommitRequest("s1", uri, "chain", {"run": run, "task": None}, {}, task_ref=task_key, run_id="r1")
    await PipelineActivities({}).commit(first)
    await PipelineActivities({}).commit(first)  # the retry, on a worker without the journal cached

    result = NodeResult(node_id="a", status=Status.COMPLETED, output="out a", execution_count=1)
    blob_key = "session/s1/scopes/multiAgent/chain/temporal/r1/a-1.json"
    blob = {"result": result.model_dump(mode="json"), "state_changes": {"set": {"k": 1}, "del": []}}
    await storage.write(blob_key, json.dumps(blob).encode())
    summary = {k: v for k, v in result.model_dump(mode="json").items() if k != "output"}
    node = CommitRequest(
        "s1",
        uri,
        "chain",
        {"run": run, "node/a": {"status": "completed", "executions": 1, "result": summary}},
        {"execution_order": ["a"]},
        node_id="a",
        blob=blob_key,
        run_id="r1",
    )
    await PipelineActivities({}).commit(node)
    await PipelineActivities({}).commit(node)

    doc = await load_scope(storage, "s1", "multiAgent", "chain")
    assert doc.fields["task"] == "the task"
    assert doc.fields["node/a"]["result"]["output"] == "out a"
    assert doc.fields["state"] == {"k": 1}
    assert doc.logs["execution_order"] == ["a"]
    assert await storage.read(task_key) is None
    assert await storage.read(blob_key) is None

    other_run = CommitRequest("s1", uri, "chain", {}, {}, node_id="a", blob=blob_key, run_id="r2")
    with pytest.raises(RuntimeError, match="the node's data is missing"):
        await PipelineActivities({}).commit(other_run)


async def test_a_missing_invocation_state_fails_the_node_without_retries(tmp_path):
    from temporalio.exceptions import ApplicationError

    from orchestra.temporal import NodeRequest, PipelineActivities

    uri = f"file:{tmp_path}/store"
    request = NodeRequest("chain", "s1", uri, "chain", "r1", "a", 1, invocation_state_ref="gone/state.json")
    with pytest.raises(ApplicationError, match="invocation state is missing") as raised:
        await PipelineActivities({})._invocation_state(storage_from_uri(uri), request)
    assert raised.value.non_retryable


async def test_a_hostile_run_id_cannot_place_the_runs_input_elsewhere(tmp_path):
    from orchestra.temporal import RunRequest
    from orchestra.temporal.worker import by_reference

    request = RunRequest("chain", "s1", f"file:{tmp_path}/store", task="go", run_id="../../../elsewhere")
    with pytest.raises(ValueError, match="invalid run_id"):
        await by_reference(request)
    assert not any(tmp_path.rglob("*.json"))


def chain_spec(length: int) -> str:
    nodes = "".join(f"  - {{id: n{i}, function: 'tests.support:set_own_key'}}\n" for i in range(length))
    edges = "".join(f"  - {{from: n{i}, to: n{i + 1}}}\n" for i in range(length - 1))
    return f"version: 1\nkind: graph\nid: chain\nnodes:\n{nodes}edges:\n{edges}"


async def test_a_nodes_activity_reads_only_what_was_committed_since_the_workers_last_read(tmp_path):
    """Point 6: a worker follows the runs it serves, so a node's activity reads the records committed
    since the last one, not the journal; it gets the same state as a worker that read everything. Of the
    agents' state, it loads only its own agent's."""
    import json

    from temporalio.testing import ActivityEnvironment

    from orchestra.session._document import Document
    from orchestra.spec import build
    from orchestra.storage import LocalFileStorage
    from orchestra.temporal import CommitRequest, NodeRequest, PipelineActivities
    from orchestra.temporal.activities import _node_view

    reads: list[str] = []

    class CountingStorage(LocalFileStorage):
        def _read(self, key: str):  # type: ignore[no-untyped-def]
            reads.append(key)
            return super()._read(key)

        def _read_from(self, key: str, offset: int):  # type: ignore[no-untyped-def]
            reads.append(f"{key} from {offset}")
            return super()._read_from(key, offset)

    uri = f"file:{tmp_path}/store"
    loaded = parse_text(chain_spec(30), "chain.yaml")
    local = build(loaded, session_id="s1", storage=uri)
    await local.invoke_async("go")  # a run of 30 saved nodes: the journal the activities follow

    def request(node_id: str) -> NodeRequest:
        return NodeRequest("chain", "s1", uri, "chain", local.run["run_id"], node_id, 2, activation=[])

    following = PipelineActivities({"chain": loaded})
    following._storages[uri] = CountingStorage(tmp_path / "store")
    env = ActivityEnvironment()
    await env.run(following.execute_node, request("n1"))
    journal = "session/s1/scopes/multiAgent/chain/journal/"
    known = set(await LocalFileStorage(tmp_path / "store").list(journal))  # what the worker read
    for index in range(3):  # the workflow commits three more records
        await following.commit(CommitRequest("s1", uri, "chain", {"marker": index}, {}))

    reads.clear()
    outcome = await env.run(following.execute_node, request("n2"))
    journal_reads = [key for key in reads if "/journal/" in key]
    # The new records: on local files the journal's records are lines of segments, so the bytes appended
    # to the segment the worker read last (from where it stopped), and segments started since, whole...
    assert journal_reads, reads
    assert " from " in journal_reads[0]
    assert all(" from " in key or key not in known for key in journal_reads), (known, reads)
    assert reads == journal_reads  # ...and nothing else

    fresh = PipelineActivities({"chain": loaded})
    again = await env.run(fresh.execute_node, request("n2"))  # a retry: its blob's key exists already
    assert again.blob == outcome.blob
    storage = storage_from_uri(uri)
    blobs = [json.loads((await storage.read(o.blob))[0]) for o in (outcome, again)]
    assert blobs[0]["state_base"] == blobs[1]["state_base"]  # what it saw is what a full load sees
    assert blobs[0]["state_base"]["n29"] == "set by n29"
    assert blobs[0]["result"]["output"] == blobs[1]["result"]["output"] == "n2"

    # The session deleted and run again (a new run, numbered from record 0 again): the worker notices.
    await storage.delete_prefix("session/s1/")
    other = build(
        parse_text(chain_spec(30) + "state: {marker: second}\n", "chain.yaml"), session_id="s1", storage=uri
    )
    await other.invoke_async("go")
    local = other
    rerun = await env.run(following.execute_node, request("n2"))
    assert json.loads((await storage.read(rerun.blob))[0])["state_base"]["marker"] == "second"

    doc = Document(
        fields={"run": {}, "agent/a": {"state": {}}, "agent/b": {"state": {"x": 1}}},
        logs={"agent/a/messages": [{"role": "user"}], "agent/b/messages": [{"role": "user"}] * 1000},
    )
    fields, logs = _node_view(doc, "a")
    assert sorted(fields) == ["agent/a", "run"]
    assert sorted(logs) == ["agent/a/messages"]
    fields["run"]["status"] = "changed"  # the shared document stays as committed
    assert doc.fields["run"] == {}


async def test_parallel_nodes_share_the_read_of_the_commits_they_depend_on(tmp_path):
    """The nodes of a fan-out start together on one worker: a read of the journal that began after a node
    asked has every commit it depends on, so the nodes share it instead of listing the journal each."""
    import json

    import anyio
    from temporalio.testing import ActivityEnvironment

    from orchestra.spec import build
    from orchestra.storage import LocalFileStorage
    from orchestra.temporal import CommitRequest, NodeRequest, PipelineActivities

    lists: list[str] = []

    class CountingStorage(LocalFileStorage):
        def _list(self, prefix, start_after, limit):  # type: ignore[no-untyped-def]
            lists.append(prefix)
            return super()._list(prefix, start_after, limit)

    uri = f"file:{tmp_path}/store"
    loaded = parse_text(chain_spec(10), "chain.yaml")
    local = build(loaded, session_id="s1", storage=uri)
    await local.invoke_async("go")
    activities = PipelineActivities({"chain": loaded})
    activities._storages[uri] = CountingStorage(tmp_path / "store")
    env = ActivityEnvironment()

    def request(node_id: str) -> NodeRequest:
        return NodeRequest("chain", "s1", uri, "chain", local.run["run_id"], node_id, 2, activation=[])

    await env.run(activities.execute_node, request("n1"))
    await activities.commit(CommitRequest("s1", uri, "chain", {"state": {"seen": "the last commit"}}, {}))
    lists.clear()
    outcomes = []

    async def node(node_id: str) -> None:
        outcomes.append(await env.run(activities.execute_node, request(node_id)))

    async with anyio.create_task_group() as group:
        for index in range(2, 8):
            group.start_soon(node, f"n{index}")
    journal_lists = [prefix for prefix in lists if prefix.endswith("/journal/")]
    assert 1 <= len(journal_lists) <= 2, lists  # 6 nodes; before, one list each
    storage = storage_from_uri(uri)
    for outcome in outcomes:  # every node saw the commit made before it started
        blob = json.loads((await storage.read(outcome.blob))[0])
        assert blob["state_base"] == {"seen": "the last commit"}
    assert len(outcomes) == 6


class _Reads:
    """A worker's storage (local files) that notes what it reads of the run's journal."""

    def __init__(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        from orchestra.storage import LocalFileStorage

        self.reads: list[str] = []
        reads = self.reads

        class CountingStorage(LocalFileStorage):
            def _list(self, prefix, start_after, limit):  # type: ignore[no-untyped-def]
                reads.append(f"list {prefix}")
                return super()._list(prefix, start_after, limit)

            def _read(self, key: str):  # type: ignore[no-untyped-def]
                reads.append(key)
                return super()._read(key)

            def _read_from(self, key: str, offset: int):  # type: ignore[no-untyped-def]
                reads.append(f"{key} from {offset}")
                return super()._read_from(key, offset)

        self.storage = CountingStorage(tmp_path / "store")

    def of_journal(self) -> list[str]:
        found = [key for key in self.reads if "/journal/" in key]
        self.reads.clear()
        return found


class _Workflow:
    """A workflow run's commits and nodes, driven by hand: each commit numbered and versioned as the
    workflow does it, each node on a worker given the key of the commit it depends on."""

    def __init__(self, tmp_path, loaded, run: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
        from temporalio.testing import ActivityEnvironment

        from orchestra.temporal import PipelineActivities

        self.uri = f"file:{tmp_path}/store"
        self.loaded = loaded
        self.run = run
        self.committer = PipelineActivities({"chain": loaded})  # the worker running the workflow
        self.env = ActivityEnvironment()

    async def commit(self, commit_id: str, after: str, fields: dict[str, object]) -> tuple[str, str]:
        """Commit ``fields`` as commit ``commit_id`` following the commit of version ``after``: its version
        and its key."""
        from orchestra.temporal import CommitRequest
        from orchestra.temporal._commits import commit_key, commit_version

        request = CommitRequest("s1", self.uri, "chain", {"run": self.run, **fields}, {}, commit_id=commit_id)
        request.version = commit_version(after, request)
        await self.committer.commit(request)
        return request.version, commit_key(commit_id, request.version)

    async def node(self, worker, node_id: str, after_commit: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
        """Run ``node_id`` on ``worker``: the shared state it saw."""
        from orchestra.temporal import NodeRequest

        request = NodeRequest(
            "chain", "s1", self.uri, "chain", str(self.run["run_id"]), node_id, 2, after_commit=after_commit
        )
        outcome = await self.env.run(worker.execute_node, request)
        found = await storage_from_uri(self.uri).read(outcome.blob)
        assert found is not None
        base: dict[str, object] = json.loads(found[0])["state_base"]
        return base


async def test_a_node_reads_nothing_when_its_worker_holds_the_commit_it_depends_on(tmp_path):
    """The workflow tells each node the key of its last commit saved before it (``after_commit``): a worker
    whose copy of the run holds it reads nothing of the journal, so the nodes of a fan-out that start one
    after another share one read. The copy holds the last commit each read found and the commit each
    node depended on whose read began after it started (on a second worker, whose first read finds
    commits made since). A commit it has not read, or another workflow run's, is read."""
    from orchestra.spec import build
    from orchestra.temporal import PipelineActivities

    loaded = parse_text(chain_spec(12), "chain.yaml")
    local = build(loaded, session_id="s1", storage=f"file:{tmp_path}/store")
    await local.invoke_async("go")
    flow = _Workflow(tmp_path, loaded, local.run)
    first, second = _Reads(tmp_path), _Reads(tmp_path)
    worker = PipelineActivities({"chain": loaded})
    worker._storages[flow.uri] = first.storage
    other = PipelineActivities({"chain": loaded})
    other._storages[flow.uri] = second.storage

    v1, k1 = await flow.commit("w1/1", "", {"state": {"seen": "commit 1"}})
    assert await flow.node(worker, "n1", k1) == {"seen": "commit 1"}  # the worker's first read of the run
    assert first.of_journal()
    for index in range(2, 7):  # one after another, as a fan-out's activities start
        assert await flow.node(worker, f"n{index}", k1) == {"seen": "commit 1"}
    assert first.of_journal() == []

    _, k2 = await flow.commit("w1/2", v1, {"state": {"seen": "commit 2"}})  # nodes of the fan-out ended
    # The second worker's first read finds commit 2: it holds commit 1 too, and reads no more for either.
    assert await flow.node(other, "n7", k1) == {"seen": "commit 2"}
    assert second.of_journal()
    assert await flow.node(other, "n8", k1) == {"seen": "commit 2"}
    assert await flow.node(other, "n9", k2) == {"seen": "commit 2"}
    assert second.of_journal() == []

    assert await flow.node(worker, "n10", k1) == {"seen": "commit 1"}  # all it depends on: nothing read
    assert first.of_journal() == []
    assert await flow.node(worker, "n11", k2) == {"seen": "commit 2"}  # not read yet: read
    assert first.of_journal()
    _, next_run = await flow.commit("w2/1", "", {"state": {"seen": "the next workflow run's commit 1"}})
    assert await flow.node(worker, "n1", next_run) == {"seen": "the next workflow run's commit 1"}
    assert first.of_journal()


def fan_spec(width: int) -> str:
    nodes = "".join(f"  - {{id: n{i}, function: 'tests.support:set_own_key'}}\n" for i in range(width))
    edges = "".join(f"  - {{from: start, to: n{i}}}\n  - {{from: n{i}, to: join}}\n" for i in range(width))
    return (
        "version: 1\nkind: graph\nid: fan\nnodes:\n  - {id: start, function: 'tests.support:set_own_key'}\n"
        f"{nodes}  - {{id: join, function: 'tests.support:report_state'}}\nedges:\n{edges}"
    )


async def test_a_fan_outs_nodes_on_temporal_share_one_read_of_the_run(temporal_address, tmp_path):
    """On a worker running one node at a time, each of a fan-out's nodes starts after the one before it
    ended (and after commits of the nodes that ended): told the commit they depend on, they read the
    run once between them, not once each. The join still sees every branch."""
    from temporalio.client import Client
    from temporalio.worker import Worker

    from orchestra import temporal
    from orchestra.temporal import PipelineActivities, PipelineWorkflow

    width = 12
    loaded = parse_text(fan_spec(width), "fan.yaml")
    uri = f"file:{tmp_path}/store"
    reads = _Reads(tmp_path)
    nodes = PipelineActivities({"fan": loaded})  # the nodes' reads are counted, not the commits'
    nodes._storages[uri] = reads.storage
    rest = PipelineActivities({"fan": loaded})
    client = await Client.connect(temporal_address)
    worker = Worker(
        client,
        task_queue="q-fan-reads",
        workflows=[PipelineWorkflow],
        activities=[rest.describe, rest.load_state, nodes.execute_node, rest.commit],
        max_concurrent_activities=1,
    )
    target = temporal.TemporalTarget(temporal_address, "default", "q-fan-reads")
    request = temporal.RunRequest(spec_id="fan", session_id="s1", storage=uri, task="go", run_id="r1")
    async with worker:
        summary = await (await temporal.start_run(client, target, request)).result()
    assert summary["status"] == "completed"
    # The start node's load (a list, a segment), one catch-up for the fan-out's 12 nodes, the join's (a
    # new segment may have begun: a list and its read), and room for a compaction's reload; before, a
    # catch-up per node of the fan-out (18-19 reads in all).
    journal = reads.of_journal()
    assert len(journal) <= 9, journal
    doc = await load_scope(storage_from_uri(uri), "s1", "multiAgent", "fan")
    seen = json.loads(doc.fields["node/join"]["result"]["output"])
    assert seen == {n: f"set by {n}" for n in ["start", *(f"n{i}" for i in range(width))]}


async def test_a_worker_holding_a_commit_saved_again_reads_the_version_its_node_depends_on(tmp_path):
    """A workflow task saved commits 2 and 3, then failed before Temporal heard of them; a worker read
    the run meanwhile (for a node depending on commit 1). The task replayed with the results that came
    since saves commit 2 again holding more, and commit 3 again holding what it held before. A node
    depending on commit 3 is on a worker whose copy holds commit 3 as first saved, without the replayed
    commit 2: its key (number and version, which chains every commit before) differs, so the worker
    reads, and the node sees what the replayed commits hold."""
    from orchestra.spec import build
    from orchestra.temporal import PipelineActivities

    loaded = parse_text(chain_spec(12), "chain.yaml")
    local = build(loaded, session_id="s1", storage=f"file:{tmp_path}/store")
    await local.invoke_async("go")
    flow = _Workflow(tmp_path, loaded, local.run)
    reads = _Reads(tmp_path)
    worker = PipelineActivities({"chain": loaded})
    worker._storages[flow.uri] = reads.storage

    v1, k1 = await flow.commit("w1/1", "", {"state": {"seen": "commit 1"}})
    v2, _ = await flow.commit("w1/2", v1, {"state": {"seen": "commit 2 as first saved"}})
    _, k3 = await flow.commit("w1/3", v2, {"marker": "commit 3"})
    assert await flow.node(worker, "n1", k1) == {"seen": "commit 2 as first saved"}  # it read them

    v2, _ = await flow.commit("w1/2", v1, {"state": {"seen": "commit 2 as replayed, holding more"}})
    _, replayed_k3 = await flow.commit("w1/3", v2, {"marker": "commit 3"})
    assert await flow.node(worker, "n2", replayed_k3) == {"seen": "commit 2 as replayed, holding more"}
    assert reads.of_journal()
    assert k3 != replayed_k3


async def test_nodes_that_finished_together_are_committed_in_one_record_in_order(tmp_path):
    """Parallel nodes that finish in one workflow activation are committed together: one journal record,
    their state changes applied in the order given (the later writer of a key wins, as locally). A retry
    of a commit that was saved (its worker died while deleting the blobs) only deletes what is left."""
    import json

    from orchestra.multiagent import NodeResult, Status
    from orchestra.session._journal import Journal
    from orchestra.session._layout import ScopeLayout
    from orchestra.temporal import CommitRequest, PipelineActivities

    uri = f"file:{tmp_path}/store"
    storage = storage_from_uri(uri)
    run = {"run_id": "r1", "status": "executing"}
    await PipelineActivities({}).commit(CommitRequest("s1", uri, "fan", {"run": run, "state": {}}, {}))
    changes = {"a": {"k": "a", "a": 1}, "b": {"k": "b", "b": 2}, "c": {"k": "c"}}
    fields: dict[str, object] = {"run": run}
    batch = []
    for node_id, sets in changes.items():
        result = NodeResult(
            node_id=node_id, status=Status.COMPLETED, output=f"out {node_id}", execution_count=1
        )
        key = f"session/s1/scopes/multiAgent/fan/temporal/r1/{node_id}-1.json"
        blob = {"result": result.model_dump(mode="json"), "state_changes": {"set": sets, "del": []}}
        await storage.write(key, json.dumps(blob).encode())
        summary = {k: v for k, v in blob["result"].items() if k != "output"}
        fields[f"node/{node_id}"] = {"status": "completed", "executions": 1, "result": summary}
        batch.append([node_id, key])
    request = CommitRequest(
        "s1",
        uri,
        "fan",
        fields,
        {"execution_order": ["a", "b", "c"]},
        run_id="r1",
        batch=batch,
        commit_id="w1/2",
    )
    journal = Journal(storage, ScopeLayout("s1", "multiAgent", "fan"))
    await PipelineActivities({}).commit(request)
    doc = await journal.load()
    assert doc is not None
    assert journal.seq == 1  # the run's first record, then one for the three nodes
    assert doc.fields["state"] == {"k": "c", "a": 1, "b": 2}
    assert [doc.fields[f"node/{n}"]["result"]["output"] for n in "abc"] == ["out a", "out b", "out c"]
    assert [await storage.read(key) for _, key in batch] == [None, None, None]

    # The worker died after deleting a's blob: the retry finds b's and c's, and does not apply them again.
    for node_id, key in batch[1:]:
        result = NodeResult(
            node_id=node_id, status=Status.COMPLETED, output=f"out {node_id}", execution_count=1
        )
        blob = {
            "result": result.model_dump(mode="json"),
            "state_changes": {"set": changes[node_id], "del": []},
        }
        await storage.write(key, json.dumps(blob).encode())
    await PipelineActivities({}).commit(request)
    again = Journal(storage, ScopeLayout("s1", "multiAgent", "fan"))
    assert await again.load() == doc
    assert again.seq == 1  # nothing saved twice
    assert [await storage.read(key) for _, key in batch] == [None, None, None]


async def test_the_last_commit_of_a_run_clears_what_its_nodes_left(tmp_path):
    """A blob whose node's result never reached a commit (a run that failed while another node ran)
    goes with the run's last commit; another run's folder stays."""
    from orchestra.temporal import CommitRequest, PipelineActivities

    uri = f"file:{tmp_path}/store"
    storage = storage_from_uri(uri)
    folder = "session/s1/scopes/multiAgent/fan/temporal"
    await storage.write(f"{folder}/r1/late-1.json", b"{}")
    await storage.write(f"{folder}/r2/input-task.json", b'"another run"')
    run = {"run_id": "r1", "status": "failed"}
    last = CommitRequest("s1", uri, "fan", {"run": run}, {}, run_id="r1", commit_id="w1/9", ends_run=True)
    await PipelineActivities({}).commit(last)
    assert await storage.list(f"{folder}/") == [f"{folder}/r2/input-task.json"]


async def test_a_commit_replayed_with_more_results_saves_them_and_not_the_saved_ones_again(tmp_path):
    """A worker saves a commit of a map's items 0 and 1, then dies before Temporal hears of it. The
    workflow task is replayed on another worker with the results that arrived meanwhile, so the same
    commit (same id) comes back holding items 0 to 3. Items 2 and 3 are saved (they were lost: the
    finished map lacked them), 0 and 1 are not applied twice, even where their blobs are still there."""
    import json

    from orchestra.session._journal import Journal
    from orchestra.session._layout import ScopeLayout
    from orchestra.temporal import CommitRequest, PipelineActivities

    uri = f"file:{tmp_path}/store"
    storage = storage_from_uri(uri)
    run = {"run_id": "r1", "status": "executing"}
    first = CommitRequest("s1", uri, "m", {"run": run, "state": {}, "map/each": {"count": 4}}, {})
    await PipelineActivities({}).commit(first)
    folder = "session/s1/scopes/multiAgent/m/temporal/r1"

    async def write_blob(index: int) -> list[object]:
        blob = {
            "result": {"status": "completed", "output": 2 * index, "usage": {}},
            # Items 0 and 1 both set "last": item 0's applied again would win over item 1's.
            "state_changes": {
                "set": {f"i{index}": True, **({"last": index} if index < 2 else {})},
                "del": [],
            },
        }
        key = f"{folder}/each-1-item{index}.json"
        await storage.write(key, json.dumps(blob).encode())
        return ["each", index, key]

    def commit(indexes: range) -> CommitRequest:
        fields = {f"map/each/item/{i}": {"status": "completed", "usage": {}} for i in indexes}
        items = [[*item] for item in written if item[1] in indexes]
        return CommitRequest(
            "s1", uri, "m", {"run": run, **fields}, {}, run_id="r1", map_items=items, commit_id="w1/2"
        )

    written = [await write_blob(i) for i in range(4)]
    await PipelineActivities({}).commit(commit(range(2)))  # saved; its worker died before it answered
    written[0] = await write_blob(0)  # it died before deleting item 0's blob
    await PipelineActivities({}).commit(commit(range(4)))  # the replayed task's commit: items 0 to 3

    journal = Journal(storage, ScopeLayout("s1", "multiAgent", "m"))
    doc = await journal.load()
    assert doc is not None
    outputs = {i: (doc.fields.get(f"map/each/item/{i}") or {}).get("output") for i in range(4)}
    assert outputs == {0: 0, 1: 2, 2: 4, 3: 6}, "an item the replayed commit held was not saved"
    assert doc.fields["state"] == {"last": 1, "i0": True, "i1": True, "i2": True, "i3": True}
    assert journal.seq == 2  # the first commit, the saved attempt, the replayed one's new items
    assert await storage.list(f"{folder}/") == []

    # The same commit once more (the second worker died too before answering): nothing is saved again.
    await PipelineActivities({}).commit(commit(range(4)))
    again = Journal(storage, ScopeLayout("s1", "multiAgent", "m"))
    assert await again.load() == doc
    assert again.seq == 2


async def test_a_commit_replayed_with_more_in_it_is_not_skipped_as_saved(tmp_path):
    """A worker saved commit 2 (node a) and died before its workflow task completed; the task run again
    on another worker grouped a and b, which finished meanwhile, into its commit 2. That commit holds
    more than the one saved: b's result is saved, not skipped (and its blob not deleted unread)."""
    import json

    from orchestra.multiagent import NodeResult, Status
    from orchestra.session._journal import Journal
    from orchestra.session._layout import ScopeLayout
    from orchestra.temporal import CommitRequest, PipelineActivities

    uri = f"file:{tmp_path}/store"
    storage = storage_from_uri(uri)
    run = {"run_id": "r1", "status": "executing"}
    await PipelineActivities({}).commit(CommitRequest("s1", uri, "fan", {"run": run, "state": {}}, {}))
    fields: dict[str, object] = {"run": run}
    batch = []
    for node_id in "ab":
        result = NodeResult(
            node_id=node_id, status=Status.COMPLETED, output=f"out {node_id}", execution_count=1
        )
        key = f"session/s1/scopes/multiAgent/fan/temporal/r1/{node_id}-1.json"
        blob = {"result": result.model_dump(mode="json"), "state_changes": {"set": {}, "del": []}}
        await storage.write(key, json.dumps(blob).encode())
        summary = {k: v for k, v in blob["result"].items() if k != "output"}
        fields[f"node/{node_id}"] = {"status": "completed", "executions": 1, "result": summary}
        batch.append([node_id, key])
    first = CommitRequest(
        "s1",
        uri,
        "fan",
        {"run": run, "node/a": fields["node/a"]},
        {},
        run_id="r1",
        batch=batch[:1],
        commit_id="w1/2",
    )
    await PipelineActivities({}).commit(first)
    replayed = CommitRequest("s1", uri, "fan", fields, {}, run_id="r1", batch=batch, commit_id="w1/2")
    await PipelineActivities({}).commit(replayed)
    doc = await Journal(storage, ScopeLayout("s1", "multiAgent", "fan")).load()
    assert doc is not None
    assert [doc.fields[f"node/{n}"]["result"]["output"] for n in "ab"] == ["out a", "out b"]


async def test_a_commit_replayed_with_a_failed_node_and_no_new_blob_is_saved(tmp_path):
    """The replayed commit holds what has no blob: a node whose activity failed (its record holds the
    failure) and the run failed with it, and the execution order's next item (sent by its index). It is
    saved: not skipped because every blob it names was folded in, which lost b's failure and left the
    journal's log behind the run's, so that every later commit was refused."""
    from orchestra.session.scopes import Journal, ScopeLayout
    from orchestra.temporal import CommitRequest, PipelineActivities

    uri = f"file:{tmp_path}/store"
    storage = storage_from_uri(uri)
    executing, failed = {"run_id": "r1", "status": "executing"}, {"run_id": "r1", "status": "failed"}
    await PipelineActivities({}).commit(CommitRequest("s1", uri, "fan", {"run": executing, "state": {}}, {}))
    key = "session/s1/scopes/multiAgent/fan/temporal/r1/a-1.json"
    result = {"node_id": "a", "status": "completed", "output": "out a", "execution_count": 1}
    await storage.write(key, json.dumps({"result": result, "state_changes": {"set": {}, "del": []}}).encode())
    node_a = {"status": "completed", "executions": 1}
    first = CommitRequest(
        "s1",
        uri,
        "fan",
        {"run": executing, "node/a": node_a},
        {"execution_order": ["a"]},
        run_id="r1",
        batch=[["a", key]],
        commit_id="w1/2",
        log_from={"execution_order": 0},
    )
    await PipelineActivities({}).commit(first)  # saved; its worker died before Temporal heard of it
    node_b = {"status": "failed", "executions": 1, "result": {"status": "failed", "error": "boom"}}
    replayed = CommitRequest(
        "s1",
        uri,
        "fan",
        {"run": failed, "node/a": node_a, "node/b": node_b},
        {"execution_order": ["a", "b"]},
        run_id="r1",
        batch=[["a", key], ["b", ""]],
        commit_id="w1/2",
        log_from={"execution_order": 0},
    )
    await PipelineActivities({}).commit(replayed)
    later = CommitRequest(
        "s1",
        uri,
        "fan",
        {"run": failed},
        {"execution_order": []},
        run_id="r1",
        commit_id="w1/3",
        log_from={"execution_order": 2},
    )
    await PipelineActivities({}).commit(later)  # refused before: the journal's log held 1 item, not 2
    doc = await Journal(storage, ScopeLayout("s1", "multiAgent", "fan")).load()
    assert doc is not None
    assert doc.fields["run"]["status"] == "failed"
    assert doc.fields["node/b"]["result"]["error"] == "boom"
    assert doc.fields["node/a"]["result"]["output"] == "out a"  # folded once, kept
    assert doc.logs["execution_order"] == ["a", "b"]


def test_a_nested_maps_finish_refuses_a_run_without_an_item_it_was_told_completed():
    """The finish of a map of maps' inner map gives its items' outputs: if the run it read lacks an item
    the workflow committed as completed, it fails (retried) naming the item, the map and the journal,
    instead of giving the outer item a result without that output."""
    from temporalio.exceptions import ApplicationError

    from orchestra.session.scopes import Document
    from orchestra.temporal import PipelineActivities
    from orchestra.temporal._types import NodeRequest

    request = NodeRequest(
        "fan", "s1", "file:/x", "fan", "r1", "each", 1, map_phase="finish", map_key="each:1", map_done=[0, 1]
    )
    doc = Document(fields={"map/each:1/item/0": {"status": "completed", "output": 1}}, logs={})
    with pytest.raises(ApplicationError, match=r"items \[1\] of map 'each:1' were committed as completed"):
        PipelineActivities._holding_items(request, doc)
    doc.fields["map/each:1/item/1"] = {"status": "completed", "output": 2}
    PipelineActivities._holding_items(request, doc)  # every item it was told of: it goes on


def test_a_nested_maps_blobs_never_take_another_nodes_keys():
    """Node ids may hold "-": node "a"'s execution 1, outer item 2, and node "a-1"'s execution 2 write
    their blobs under different keys (one would overwrite the other's result or list)."""
    from orchestra.temporal._types import NodeRequest
    from orchestra.temporal.activities import blob_base

    nested = NodeRequest("g", "s1", "file:/x", "g", "r1", "a", 1, map_phase="item", map_key="a:2")
    plain = NodeRequest("g", "s1", "file:/x", "g", "r1", "a-1", 2, map_phase="item")
    suffixes = ("", "-items", "-item0", "-spent", "-attempts")
    assert not {blob_base(nested) + x for x in suffixes} & {blob_base(plain) + x for x in suffixes}
