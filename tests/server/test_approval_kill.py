"""An approved side-effecting call runs once, with its idempotency key, when ``orchestra serve`` is
SIGKILLed between the approval and the call's completion (issue 37 item 3), with real processes and
real HTTP: the approval (an edit) is stored with the turn before the call starts, so the server that
takes the run over runs the edited call again with the same key (``on_unknown="retry"``), never asks
again, and the service that honours the key carries it out once."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.server.approval_agents import bank_config
from tests.server.conftest import FAST_RUNS, auth
from tests.server.test_platform_processes import Servers, final_record, servers  # noqa: F401


def test_a_kill_between_the_approval_and_the_call_s_end_runs_the_approved_call_once(
    tmp_path: Path,
    servers,  # noqa: F811
):
    ledger, die = tmp_path / "ledger.txt", tmp_path / "die"
    group: Servers = servers(
        bank_config(tmp_path, FAST_RUNS), ORCHESTRA_TEST_LEDGER=str(ledger), ORCHESTRA_TEST_DIE=str(die)
    )
    first = group.start()
    asked = httpx.post(
        f"{first}/api/v1/agents/bank/invoke",
        json={"input": "transfer 500", "session_id": "k"},
        headers=auth(),
        timeout=60,
    ).json()
    assert asked["status"] == "interrupted", asked
    (question,) = asked["interrupts"]
    assert (question["name"], question["tool"]) == ("tool_approval", "approved_transfer")
    assert not ledger.exists()  # nothing ran before the answer

    die.write_text("")  # the tool kills its server once, after it wrote its transfer
    edit = {"decision": "edit", "input": {"amount": 300}}
    body = {"session_id": "k", "responses": [{"interrupt_id": question["id"], "response": edit}]}
    try:  # a background run is answered 202 before it dies
        accepted = httpx.post(f"{first}/api/v1/agents/bank/runs", json=body, headers=auth(), timeout=30)
        run_id = accepted.json()["run_id"]
    except httpx.TransportError:
        raise AssertionError("the server died before it accepted the run") from None
    group.processes[first].wait(30)
    assert not die.exists(), "the tool did not run"
    group.kill(first)
    cut = ledger.read_text().split()
    assert len(cut) == 2
    assert cut[1] == "300"

    second = group.start()  # its sweep takes the run of the gone server over
    record = final_record(second, run_id)
    assert (record["status"], record["output"]) == ("completed", "success: transferred 300"), (
        record["error"],
        record["error_code"],
    )
    lines = [line for line in ledger.read_text().split("\n") if line]
    assert lines == [f"{cut[0]} 300", f"{cut[0]} 300"]  # run again with the same key: one transfer
    # Never asked again; the session goes on.
    after = httpx.post(
        f"{second}/api/v1/agents/bank/invoke",
        json={"input": "thanks", "session_id": "k"},
        headers=auth(),
        timeout=60,
    ).json()
    assert (after["status"], after["output"]) == ("completed", "echo: thanks"), after
