"""What the workflow reads back whole stays under Temporal's 2 MB payload limit on a large graph: a
pipeline's description and a run's scheduling state (at every continue-as-new) cross compressed once
they are large (``_types.pack``), and come back as they were."""

from __future__ import annotations

import copy

from temporalio.converter import default

from orchestra.session.scopes import Document, Journal, ScopeLayout
from orchestra.spec import build, parse_text
from orchestra.storage import storage_from_uri
from orchestra.temporal import PipelineActivities
from orchestra.temporal._types import StateRequest, unpack
from tests.temporal.test_continue_as_new import chain_spec

LIMIT = 2 * 1024 * 1024  # Temporal refuses a payload over 2 MB
NODES = 13_000  # about the most distinct nodes a YAML file holds (100,000 values)


def payload_bytes(value: object) -> int:
    """The size of ``value`` as temporalio encodes it for the workflow's history."""
    (payload,) = default().payload_converter.to_payloads([value])
    return payload.ByteSize()


async def test_a_large_graphs_description_and_read_back_fit_a_payload(tmp_path):
    text = chain_spec(NODES)
    loaded = parse_text(text, "chain.yaml")
    activities = PipelineActivities({"chain": loaded})

    described = await activities.describe("chain")
    assert payload_bytes(described) < LIMIT
    structure = build(loaded).structure()
    assert unpack(described)["nodes"] == structure["nodes"]
    assert payload_bytes(unpack(described)) > LIMIT / 4  # large enough to be packed: the check means it

    # A run of the chain that stopped at its last node: a real node record (from a short run), copied.
    small = await build(parse_text(chain_spec(2), "small.yaml")).invoke_async("go")
    record = {"status": "completed", "executions": 1, "result": small.results["n0"].model_dump(mode="json")}
    fields = {
        f"node/n{i}": {**copy.deepcopy(record), "activation": [f"n{i - 1}"] if i else []}
        for i in range(NODES)
    }
    for i in range(NODES):
        fields[f"node/n{i}"]["result"]["node_id"] = f"n{i}"
    fields["run"] = {"run_id": "r1", "status": "executing"}
    logs = {"execution_order": [f"n{i}" for i in range(NODES)]}
    uri = f"file:{tmp_path}/store"
    await Journal(storage_from_uri(uri), ScopeLayout("s1", "multiAgent", "chain")).create(
        Document(fields, logs)
    )

    saved = await activities.load_state(StateRequest("chain", "s1", uri, "chain"))
    assert payload_bytes(saved) < LIMIT
    back = unpack(saved)
    assert payload_bytes(back) > LIMIT  # as it was, it would not cross
    assert back["logs"]["execution_order"] == logs["execution_order"]
    assert back["fields"][f"node/n{NODES - 1}"]["result"]["node_id"] == f"n{NODES - 1}"
    assert "output" not in back["fields"]["node/n0"]["result"]  # outputs stay in storage


async def test_a_small_description_crosses_as_it_is():
    """Histories recorded before packing replay unchanged: a small graph's description is not packed."""
    loaded = parse_text(chain_spec(3), "chain.yaml")
    described = await PipelineActivities({"chain": loaded}).describe("chain")
    assert unpack(described) is described
    assert described["nodes"] == build(loaded).structure()["nodes"]


async def test_a_run_whose_read_backs_are_packed_hands_over_and_replays(
    temporal_address, tmp_path, monkeypatch
):
    """Every description and read-back packed (the threshold at 0): the workflow unpacks them (in its
    sandbox, on replay too), hands over as usual, and ends with the local run's result."""
    import orchestra.temporal._types as types
    from orchestra import load
    from tests.temporal.test_continue_as_new import check_histories, run_long

    monkeypatch.setattr(types, "PACK_ABOVE", 0)
    monkeypatch.setenv("ORCHESTRA_TEST_CALLS", str(tmp_path / "calls"))
    text = chain_spec(80)
    loaded = parse_text(text, "chain.yaml")
    assert "orchestra/zlib" in await PipelineActivities({"chain": loaded}).describe("chain")
    summary, histories = await run_long(temporal_address, "q-packed", loaded, f"file:{tmp_path}/store")
    assert summary["status"] == "completed", summary
    await check_histories(histories, "orchestra-chain-s1")
    (tmp_path / "chain.yaml").write_text(text)
    local = await load(tmp_path / "chain.yaml").invoke_async("go")
    assert summary["execution_order"] == local.execution_order
