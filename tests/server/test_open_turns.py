"""Turns cut inside a side-effecting tool by a SIGKILLed ``orchestra serve``, and what the next request
to the session gets (issue 35 items 8, 9 and 10), with real processes and real HTTP:

- a request repeated with its Idempotency-Key finishes the cut turn (its tool's effect once) and answers
  what the turn answered, never a ``completed`` the turn never gave; as a background run the same, and
  the session is free afterwards;
- a new message finishes the cut turn first, then runs: the session stays loadable;
- a new message whose cut turn stops for a human (an unknown outcome) is kept and runs once the
  question is answered.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.server.conftest import FAST_RUNS, auth, write_platform_config
from tests.server.test_platform_processes import Servers, final_record, servers  # noqa: F401

TRANSFER = """version: 1
kind: agent
id: transfer
agents:
  - name: transfer
    tools: ['tests.server.agents:transfer', 'tests.server.agents:transfer_asking']
    model: function:tests.server.agents:transferring
    conversation_manager: {type: none}
"""


def transfer_config(root: Path, runs: str = FAST_RUNS) -> Path:
    config = write_platform_config(root, f"file:{root}/store", runs)
    (root / "transfer.yaml").write_text(TRANSFER)
    text = config.read_text().replace(
        "  - {id: other,", "  - {id: transfer, spec: transfer.yaml, workspace: acme}\n  - {id: other,"
    )
    config.write_text(text)
    return config


class Setup:
    """A server group on the transfer config, the ledger of transfers and the kill switch."""

    def __init__(self, root: Path, servers) -> None:  # noqa: F811
        self.ledger, self.die = root / "ledger.txt", root / "die"
        self.group: Servers = servers(
            transfer_config(root), ORCHESTRA_TEST_LEDGER=str(self.ledger), ORCHESTRA_TEST_DIE=str(self.die)
        )

    def transfers(self) -> list[str]:
        """The transfers carried out: one per idempotency key."""
        lines = self.ledger.read_text().split("\n") if self.ledger.exists() else []
        return sorted({line for line in lines if line})

    def killed_inside_the_tool(self, path: str, body: dict, headers: dict | None = None) -> str:
        """Start a server, send it a request whose tool kills it; returns the url of the dead server."""
        url = self.group.start()
        self.die.write_text("")
        try:  # a background run is answered 202 before it dies
            answer = httpx.post(f"{url}{path}", json=body, headers={**auth(), **(headers or {})}, timeout=30)
            assert answer.status_code == 202, answer.text
        except httpx.TransportError:
            pass
        self.group.processes[url].wait(30)
        assert not self.die.exists(), "the tool did not run"
        self.group.kill(url)
        return url


def session(url: str, sid: str) -> list[dict]:
    answer = httpx.get(f"{url}/api/v1/agents/transfer/sessions/{sid}", headers=auth(), timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]


def texts(messages: list[dict]) -> list[str | None]:
    return [next((b["text"] for b in m["content"] if "text" in b), None) for m in messages]


def test_a_key_retry_after_a_kill_inside_a_tool_finishes_the_turn(tmp_path, servers):  # noqa: F811
    setup = Setup(tmp_path, servers)
    body, key = {"input": "transfer 5", "session_id": "s"}, {"Idempotency-Key": "k-1"}
    setup.killed_inside_the_tool("/api/v1/agents/transfer/invoke", body, key)
    url = setup.group.start()
    while True:  # repeated as a client does, while the answer says to repeat it
        answer = httpx.post(
            f"{url}/api/v1/agents/transfer/invoke", json=body, headers={**auth(), **key}, timeout=30
        )
        if answer.status_code != 409:
            break
        assert answer.json()["error"]["code"] == "request_in_progress", answer.text
    assert answer.status_code == 200, answer.text
    assert (answer.json()["status"], answer.json()["output"]) == ("completed", "done: transfer 5")
    assert texts(session(url, "s")) == ["transfer 5", None, None, "done: transfer 5"]
    assert len(setup.transfers()) == 1
    again = httpx.post(
        f"{url}/api/v1/agents/transfer/invoke", json=body, headers={**auth(), **key}, timeout=30
    )
    assert again.json()["output"] == "done: transfer 5"
    assert len(texts(session(url, "s"))) == 4


def test_a_background_run_killed_inside_a_tool_is_finished_by_the_server_that_takes_it_over(
    tmp_path,
    servers,  # noqa: F811
):
    setup = Setup(tmp_path, servers)
    body, key = {"input": "transfer 7", "session_id": "b"}, {"Idempotency-Key": "k-2"}
    setup.killed_inside_the_tool("/api/v1/agents/transfer/runs", body, key)
    url = setup.group.start()
    accepted = httpx.post(
        f"{url}/api/v1/agents/transfer/runs", json=body, headers={**auth(), **key}, timeout=30
    )
    assert accepted.status_code == 202, accepted.text
    assert accepted.headers["Idempotent-Replayed"] == "true"
    record = final_record(url, accepted.json()["run_id"])
    assert (record["status"], record["output"], record["attempt"]) == ("completed", "done: transfer 7", 2)
    assert texts(session(url, "b")) == ["transfer 7", None, None, "done: transfer 7"]
    assert len(setup.transfers()) == 1
    # The session is free: a new message runs, and there is nothing left to resume.
    after = httpx.post(
        f"{url}/api/v1/agents/transfer/invoke",
        json={"input": "thanks", "session_id": "b"},
        headers=auth(),
        timeout=30,
    )
    assert (after.status_code, after.json().get("output")) == (200, "echo: thanks"), after.text
    resume = httpx.post(
        f"{url}/api/v1/agents/transfer/sessions/b/resume", json={}, headers=auth(), timeout=30
    )
    assert resume.status_code == 409, resume.text
    assert resume.json()["error"]["code"] == "nothing_to_resume"


def invoke(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/agents/transfer/invoke", json=body, headers=auth(), timeout=30)


def test_a_new_message_after_a_kill_inside_a_tool_finishes_that_turn_then_runs(tmp_path, servers):  # noqa: F811
    setup = Setup(tmp_path, servers)
    setup.killed_inside_the_tool("/api/v1/agents/transfer/invoke", {"input": "transfer 3", "session_id": "n"})
    url = setup.group.start()
    (killed,) = httpx.get(f"{url}/api/v1/runs?session_id=n", headers=auth(), timeout=30).json()["runs"]
    # Its server gone, the killed run reads what it is: its turn left open, not completed.
    left = final_record(url, killed["run_id"])
    assert (left["status"], left["needs_resume"], left["stored"]) == ("interrupted", True, True), left
    answer = invoke(url, {"input": "hello", "session_id": "n"})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["output"], answer.json()["resumed"]) == ("echo: hello", True)
    # The run that finished its turn is named: nothing offers to resume it again.
    left = httpx.get(f"{url}/api/v1/runs/{killed['run_id']}", headers=auth(), timeout=30).json()
    assert left["resumed_by"] == answer.json()["run_id"]
    again = httpx.post(f"{url}/api/v1/runs/{killed['run_id']}/resume", headers=auth(), timeout=30)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "not_resumable")
    expected = ["transfer 3", None, None, "done: transfer 3", "hello", "echo: hello"]
    assert texts(session(url, "n")) == expected
    assert len(setup.transfers()) == 1
    after = invoke(url, {"input": "more", "session_id": "n"})  # the session loads and goes on
    assert (after.status_code, after.json()["output"]) == (200, "echo: more"), after.text


def test_a_new_message_whose_killed_turn_asks_a_human_runs_once_it_is_answered(tmp_path, servers):  # noqa: F811
    setup = Setup(tmp_path, servers)
    setup.killed_inside_the_tool("/api/v1/agents/transfer/invoke", {"input": "ask 4", "session_id": "q"})
    url = setup.group.start()
    asked = invoke(url, {"input": "hello", "session_id": "q"})
    assert asked.status_code == 200, asked.text
    assert (asked.json()["status"], asked.json()["resumed"]) == ("interrupted", True)
    (question,) = asked.json()["interrupts"]
    assert (question["name"], question["tool"]) == ("outcome_unknown", "transfer_asking")
    answered = invoke(
        url,
        {"responses": [{"interrupt_id": question["id"], "response": "it went through"}], "session_id": "q"},
    )
    assert answered.status_code == 200, answered.text
    assert (answered.json()["status"], answered.json()["output"]) == ("completed", "echo: hello")
    expected = ["ask 4", None, None, "done: ask 4", "hello", "echo: hello"]
    assert texts(session(url, "q")) == expected
    assert len(setup.transfers()) == 1  # the answer is the tool's result: not run again
