"""Tool approval under storage faults (issue 37 item 3): hypothesis picks each call's answer (approve,
reject, edit, always) and storage writes that fail, before or after they take effect (a full disk, a
refused request, a lost answer), while an agent works through four side-effecting calls that require
approval. After each failure the caller starts again from what is stored (a new agent, as a new
process would) and answers what is asked. Afterwards every approved call took effect once, with its
answer's arguments, under its own idempotency key; no rejected call ran; after "always" no call asked.
40 schedules in CI, ``ORCHESTRA_STRESS=1`` runs 400; and each write failing in turn, every call edited."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestra import Agent, ToolContext, tool
from orchestra.errors import OrchestraError
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FaultyStorage, FunctionModel, ToolCall
from orchestra.tools.approval import APPROVAL

EXAMPLES = 400 if os.environ.get("ORCHESTRA_STRESS") == "1" else 40
PAYEES = [("ann", 100), ("bob", 200), ("cy", 300), ("dee", 400)]


class Service:
    """A payment service that honours idempotency keys: one payment per key, whatever the retries."""

    def __init__(self) -> None:
        self.payments: dict[str, tuple[str, int]] = {}
        self.calls: list[tuple[str, tuple[str, int]]] = []

    def pay(self, key: str, to: str, amount: int) -> None:
        self.calls.append((key, (to, amount)))
        self.payments.setdefault(key, (to, amount))


def build(storage: FaultyStorage, service: Service) -> Agent:
    @tool(requires_approval=True, effects=True, context=True, on_unknown="retry")
    def send_money(to: str, amount: int, tool_context: ToolContext) -> str:
        """Send money.

        Args:
            to: who gets it.
            amount: how much.
        """
        service.pay(tool_context.idempotency_key, to, amount)
        return f"sent {amount} to {to}"

    def model(messages: list[dict[str, Any]], specs: Any) -> Any:
        prompt_at = max(
            i for i, m in enumerate(messages) if m["role"] == "user" and "text" in m["content"][0]
        )
        if prompt_at < len(messages) - 1:
            return "done"
        _, amount, _, to = messages[prompt_at]["content"][0]["text"].split()
        return ToolCall("send_money", {"to": to, "amount": int(amount)}, tool_use_id=f"call-{to}")

    manager = SnapshotSessionManager("s", storage=storage)
    return Agent(model=FunctionModel(model), tools=[send_money], session_manager=manager)


def texts(agent: Agent) -> list[str]:
    return [b["text"] for m in agent.messages if m["role"] == "user" for b in m["content"] if "text" in b]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    decisions=st.lists(st.sampled_from(["approve", "reject", "edit", "always"]), min_size=4, max_size=4),
    faults=st.lists(
        st.tuples(st.integers(1, 14), st.booleans(), st.sampled_from(["unavailable", "full"])),
        min_size=1,
        max_size=3,
    ),
)
def test_every_approved_call_takes_effect_once_with_its_answer_under_faults(decisions, faults):
    injected = check(decisions, faults)
    event(f"faults injected: {injected}")


@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("nth", range(1, 15))
def test_edited_calls_with_a_write_failing_at_each_point(nth, after):
    """Every write of the schedule fails once in turn, each call edited: a call cut after it started is
    run again with its edit, never the model's arguments."""
    check(["edit"] * 4, [(nth, after, "unavailable")])


def check(decisions: list[str], faults: list[tuple[int, bool, str]]) -> int:
    """Runs the schedule and checks what it did; how many faults were injected."""
    storage = FaultyStorage(InMemoryStorage())
    for nth, after, kind in faults:
        storage.fail("write", nth=nth, after=after, kind=kind)
    service = Service()
    asked: list[str] = []
    answers = dict(zip([to for to, _ in PAYEES], decisions, strict=True))

    def answer(to: str, amount: int) -> Any:
        decision = answers[to]
        return (
            {"decision": "edit", "input": {"to": to, "amount": amount + 1}}
            if decision == "edit"
            else decision
        )

    for to, amount in PAYEES:
        prompt = f"send {amount} to {to}"
        for _ in range(20):  # each attempt as a new process: what is stored, then what is asked
            try:
                agent = build(storage, service)
                questions = agent.open_interrupts()
                if questions:
                    (question,) = questions
                    assert question.name == APPROVAL
                    request = question.reason
                    if request["input"]["to"] not in asked:
                        asked.append(request["input"]["to"])
                    result = agent([question.to_response(answer(to, amount))])
                elif prompt not in texts(agent) or agent.open_turn() is not None:
                    result = agent(prompt)
                else:
                    break  # this payment's turn is done and stored
            except OrchestraError:
                continue
            if result.stop_reason != "interrupt" and not agent.open_interrupts():
                continue  # check what is stored on the next round
        else:
            raise AssertionError(f"{prompt!r} did not finish in 20 attempts")

    expected: dict[str, tuple[str, int]] = {}
    expected_asked: list[str] = []
    always = False
    for to, amount in PAYEES:
        if not always:
            expected_asked.append(to)
        decision = "approve" if always else answers[to]
        always = always or decision == "always"
        if decision != "reject":
            expected[to] = (to, amount + 1 if decision == "edit" else amount)
    assert asked == expected_asked
    assert sorted(service.payments.values()) == sorted(expected.values())
    assert len(service.payments) == len(expected)  # one key per approved call
    for key, arguments in service.calls:  # a call run again (an unknown outcome) had its key and answer
        assert service.payments[key] == arguments
    return len(storage.injected)
