"""Side-effecting tools run once across crashes (issue 26).

A local service counts effects by Idempotency-Key. An agent (alone, and as a graph's node) works through
multi-tool turns whose tools call it; its process is SIGKILLed at points hypothesis picks (before or
after any storage write, so before or after an effect starts, returns, or is recorded) and started
again until the work is done. Afterwards every intent was carried out exactly once (none lost, none
twice) and the history passes both providers' request validators. 50 schedules in CI,
``ORCHESTRA_STRESS=1`` runs 500. The unit tests below check each ``on_unknown`` policy.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import uuid
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra import Agent, ToolContext, tool
from orchestra.multiagent import GraphBuilder, Status
from orchestra.session import SnapshotSessionManager
from orchestra.session._journal import Journal
from orchestra.session._layout import ScopeLayout
from orchestra.storage import InMemoryStorage, LocalFileStorage
from orchestra.storage._base import ForwardingStorage
from orchestra.testing import FunctionModel, ScriptedModel, ToolCall
from tests.effects_service import EffectService
from tests.models.provider_rules import bedrock_problems, openai_problems
from tests.support import cut_when

EXAMPLES = 500 if os.environ.get("ORCHESTRA_STRESS") == "1" else 50
TURNS = 2
INTENTS = [f"{turn}-{name}" for turn in range(TURNS) for name in ("a", "b", "c")]


def effect_tools(url: str) -> list[Any]:
    @tool(effects=True, context=True, on_unknown="retry")
    def send(intent: str, tool_context: ToolContext) -> str:
        """Carry out an intent (an email, a payment) through the service, with the call's key."""
        answer = httpx.post(
            url, json={"intent": intent}, headers={"Idempotency-Key": tool_context.idempotency_key}
        )
        return str(answer.json()["done"])

    @tool
    def lookup(query: str) -> str:
        """Read something (no side effect)."""
        return f"found {query}"

    return [send, lookup]


def planner(messages: list[dict[str, Any]], specs: Any) -> Any:
    """Like a real model, a fresh tool-call id every call: a turn asked again would get new ids (new keys).
    A turn: send a and look up, then send b and c, then answer."""
    prompt_index = max(i for i, m in enumerate(messages) if m["role"] == "user" and "text" in m["content"][0])
    turn = messages[prompt_index]["content"][0]["text"].removeprefix("turn-")
    batches = sum(
        1 for m in messages[prompt_index:] if m["role"] == "user" and "toolResult" in m["content"][0]
    )

    def call(name: str, **args: str) -> ToolCall:
        return ToolCall(name, args, tool_use_id=f"call_{uuid.uuid4().hex[:12]}")

    if batches == 0:
        return [call("send", intent=f"{turn}-a"), call("lookup", query=turn)]
    if batches == 1:
        return [call("send", intent=f"{turn}-b"), call("send", intent=f"{turn}-c")]
    return f"done {turn}"


class KillAt(ForwardingStorage):
    """SIGKILLs its own process at its ``at``-th write, before or after the write is made."""

    def __init__(self, inner: Any, at: int, after: bool) -> None:
        super().__init__(inner)
        self.at, self.after, self.writes = at, after, 0

    async def write(self, key: str, data: bytes, *, expect: Any = None) -> str:
        self.writes += 1
        if self.writes == self.at and not self.after:
            os.kill(os.getpid(), signal.SIGKILL)
        version = await self.inner.write(key, data, expect=expect)
        if self.writes == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return version


def agent_worker(root: str, url: str, at: int, after: bool) -> None:
    """One process's share of the work: the turns not answered yet (an open one resumes)."""

    async def main() -> None:
        storage = KillAt(LocalFileStorage(root, durable=False), at, after)  # a kill keeps the page cache
        agent = await Agent.create(
            model=FunctionModel(planner),
            tools=effect_tools(url),
            session_manager=SnapshotSessionManager("s", storage=storage),
        )
        for turn in range(TURNS):
            if not any(
                m["content"][0].get("text") == f"done {turn}"
                for m in agent.messages
                if m["role"] == "assistant"
            ):
                await agent.invoke_async(f"turn-{turn}")

    anyio.run(main)


def graph_worker(root: str, url: str, at: int, after: bool) -> None:
    async def main() -> None:
        storage = KillAt(LocalFileStorage(root, durable=False), at, after)  # a kill keeps the page cache
        for turn in range(TURNS):
            done = await Journal(storage, ScopeLayout("s", "multiAgent", f"g{turn}")).load()
            if done is not None and done.fields["run"]["status"] == Status.COMPLETED.value:
                continue  # a graph that completed would start a fresh run: its turn is done
            builder = GraphBuilder().set_graph_id(f"g{turn}")
            builder.add_node(Agent(name="worker", model=FunctionModel(planner), tools=effect_tools(url)))
            builder.set_session_manager(SnapshotSessionManager("s", storage=storage))
            graph = builder.build()
            result = await graph.invoke_async(f"turn-{turn}", resume_unfinished=True)
            assert result.status == Status.COMPLETED, result.reason

    anyio.run(main)


def run_until_done(worker: Any, root: str, url: str, kills: list[tuple[int, bool]]) -> int:
    """Run the worker in forked processes, each killed at its point, then once more to the end."""
    context = multiprocessing.get_context("fork")  # no re-import: a few ms a process
    killed = 0
    for at, after in [*kills, (10**6, False)]:
        process = context.Process(target=worker, args=(root, url, at, after))
        process.start()
        process.join(60)
        if process.exitcode == -signal.SIGKILL:
            killed += 1
            continue
        assert process.exitcode == 0, f"the worker failed (exit {process.exitcode})"
        return killed
    raise AssertionError("the last run was not killed, so it ends")


kill_points = st.lists(
    st.tuples(st.integers(min_value=1, max_value=30), st.booleans()), min_size=1, max_size=3
)


@pytest.fixture(scope="module")
def service():
    with EffectService() as running:
        yield running


def check_history(messages: list[dict[str, Any]], tools: list[Any]) -> None:
    from orchestra.models.bedrock import BedrockModel
    from orchestra.models.openai import OpenAIModel

    request = [*messages, {"role": "user", "content": [{"text": "next"}]}]
    specs = [t.spec for t in tools]
    bedrock = BedrockModel("anthropic.claude-3-5-sonnet-20240620-v1:0", region_name="us-east-1")
    openai = OpenAIModel("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert bedrock_problems(bedrock.request_body(request, specs)) == []
    assert openai_problems(openai.request_body(request, specs)) == []


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(kill_points)
def test_an_agent_killed_anywhere_runs_each_effect_once(
    service: EffectService, kills: list[tuple[int, bool]]
) -> None:
    service.reset()
    root = tempfile.mkdtemp()
    run_until_done(agent_worker, root, service.url, kills)
    assert dict(service.effects) == dict.fromkeys(INTENTS, 1), "an effect was lost or carried out twice"
    final = Agent(
        model=ScriptedModel([]),
        tools=effect_tools(service.url),
        session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(root)),
    )
    assert final.open_turn() is None
    check_history(final.messages, effect_tools(service.url))


@settings(
    max_examples=max(10, EXAMPLES // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(kill_points)
def test_a_graph_node_killed_anywhere_runs_each_effect_once(
    service: EffectService, kills: list[tuple[int, bool]]
) -> None:
    service.reset()
    root = tempfile.mkdtemp()
    run_until_done(graph_worker, root, service.url, kills)
    assert dict(service.effects) == dict.fromkeys(INTENTS, 1), "an effect was lost or carried out twice"


# -- the on_unknown policies, one by one ---------------------------------------------------------------


def calls_then(effect: Any, *, after_results: str = "ok") -> ScriptedModel:
    return ScriptedModel([[ToolCall("pay", {"amount": 5}, tool_use_id="pay-1")], after_results, "again"])


def crashed_agent(on_unknown: str, storage: Any, runs: list[int]) -> Agent:
    """An agent whose session holds a turn whose payment started and never returned."""

    @tool(effects=True, on_unknown=on_unknown)  # type: ignore[arg-type]
    def pay(amount: int) -> str:
        """Pay."""
        runs.append(amount)
        return f"paid {amount}"

    return Agent(
        model=ScriptedModel(["after the payment", "next"]),
        tools=[pay],
        session_manager=SnapshotSessionManager("s", storage=storage),
    )


async def leave_started_payment(storage: Any) -> None:
    """Run a turn whose side-effecting call starts, and 'kill' the process inside it (cancellation)."""

    started = anyio.Event()

    @tool(effects=True)
    async def pay(amount: int) -> str:
        """Pay."""
        started.set()
        await anyio.sleep_forever()  # the process dies here
        return "never"

    agent = Agent(
        model=ScriptedModel([[ToolCall("pay", {"amount": 5}, tool_use_id="pay-1")]]),
        tools=[pay],
        session_manager=SnapshotSessionManager("s", storage=storage),
    )
    await cut_when(started, lambda: agent.invoke_async("buy it"))


async def test_on_unknown_interrupt_asks_a_human_and_their_answer_is_the_result() -> None:
    storage, runs = InMemoryStorage(), []
    await leave_started_payment(storage)
    agent = crashed_agent("interrupt", storage, runs)
    result = await agent.invoke_async("buy it")  # the caller's retry: the open turn resumes
    assert result.resumed
    assert result.stop_reason == "interrupt"
    (asked,) = result.interrupts
    assert asked.name == "outcome_unknown"
    assert asked.reason["tool"] == "pay"
    assert asked.reason["idempotency_key"].startswith("oc-")
    assert runs == []  # not run again on its own
    answer = [{"interruptResponse": {"interruptId": asked.id, "response": "the payment went through"}}]
    done = await agent.invoke_async(answer)
    assert done.text == "after the payment"
    results = [b["toolResult"] for m in agent.messages for b in m["content"] if "toolResult" in b]
    assert results[-1]["content"] == [{"text": "the payment went through"}]
    assert runs == []


async def test_on_unknown_interrupt_can_be_answered_with_a_retry_under_the_same_key() -> None:
    storage, runs = InMemoryStorage(), []
    await leave_started_payment(storage)
    agent = crashed_agent("interrupt", storage, runs)
    asked = (await agent.invoke_async("buy it")).interrupts[0]
    await agent.invoke_async([{"interruptResponse": {"interruptId": asked.id, "response": {"retry": True}}}])
    assert runs == [5]


async def test_a_new_prompt_waits_for_the_answer_the_open_turn_asks_and_runs_after_it() -> None:
    """Issue 35 item 10: the open turn stops for a human, the new prompt is kept with the turn's ledger
    (in the session) and runs, in the invocation that answers, right after the turn is finished."""
    storage, runs = InMemoryStorage(), []
    await leave_started_payment(storage)
    asked = await crashed_agent("interrupt", storage, runs).invoke_async("and a receipt please")
    assert asked.resumed
    (question,) = asked.interrupts
    later = crashed_agent("interrupt", storage, runs)  # another process answers
    assert [m["content"][0].get("text") for m in later.messages] == ["buy it", None]
    answer = [{"interruptResponse": {"interruptId": question.id, "response": "it went through"}}]
    done = await later.invoke_async(answer)
    assert done.resumed
    assert done.text == "next"  # the reply to the new prompt, after the open turn's
    texts = [m["content"][0].get("text") for m in later.messages]
    assert texts == ["buy it", None, None, "after the payment", "and a receipt please", "next"]
    assert later.pending_tools is None
    assert runs == []
    reloaded = crashed_agent("interrupt", storage, runs)
    assert reloaded.messages == later.messages


async def test_on_unknown_retry_runs_it_again_and_error_tells_the_model() -> None:
    storage, runs = InMemoryStorage(), []
    await leave_started_payment(storage)
    retried = crashed_agent("retry", storage, runs)
    assert (await retried.invoke_async("buy it")).text == "after the payment"
    assert runs == [5]

    storage, runs = InMemoryStorage(), []
    await leave_started_payment(storage)
    told = crashed_agent("error", storage, runs)
    assert (await told.invoke_async("buy it")).text == "after the payment"
    assert runs == []
    result = next(b["toolResult"] for m in told.messages for b in m["content"] if "toolResult" in b)
    assert result["status"] == "error"
    assert "may or may not have taken effect" in result["content"][0]["text"]


async def test_a_recorded_result_is_reused_and_the_key_is_stable_across_processes() -> None:
    """A call that returned is not run again when its turn resumes, and a call's key is the same in every
    process: it is made from the session, the scope and the model's call id."""
    storage, keys = InMemoryStorage(), []

    @tool(effects=True, context=True)
    def pay(amount: int, tool_context: ToolContext) -> str:
        """Pay."""
        keys.append(tool_context.idempotency_key)
        return "paid"

    started = anyio.Event()

    @tool
    async def slow(query: str) -> str:
        """Hangs: the process dies while it runs (once ``pay`` has paid)."""
        while not keys:  # noqa: ASYNC110 (pay runs in a worker thread)
            await anyio.sleep(0.01)
        started.set()
        await anyio.sleep_forever()
        return "never"

    first = Agent(
        model=ScriptedModel(
            [
                [
                    ToolCall("pay", {"amount": 1}, tool_use_id="p"),
                    ToolCall("slow", {"query": "q"}, tool_use_id="s"),
                ]
            ]
        ),
        tools=[pay, slow],
        session_manager=SnapshotSessionManager("s", storage=storage),
    )
    await cut_when(started, lambda: first.invoke_async("go"))
    assert len(keys) == 1

    @tool
    def fast(query: str) -> str:
        """Answers."""
        return "fine"

    second = Agent(
        model=ScriptedModel(["all done"]),
        tools=[pay, fast.__class__(lambda query: "fine", name="slow")],
        session_manager=SnapshotSessionManager("s", storage=storage),
    )
    assert (await second.invoke_async("go")).text == "all done"
    assert len(keys) == 1  # the payment's recorded result was reused
    again = Agent(
        model=ScriptedModel([]),
        tools=[pay],
        session_manager=SnapshotSessionManager("s", storage=InMemoryStorage()),
    )
    assert again.effect_scope == first.effect_scope  # same session and scope: same keys for the same call ids


# -- a new prompt after a turn killed inside its side-effecting tool (issue 35 item 8) ------------------


def killed_inside_the_tool(root: str, url: str) -> None:
    """A process whose turn dies inside its side-effecting tool, once the effect is done."""

    @tool(effects=True, context=True, on_unknown="retry")
    def send(intent: str, tool_context: ToolContext) -> str:
        """Carry out an intent, then the process dies before the tool returns."""
        httpx.post(url, json={"intent": intent}, headers={"Idempotency-Key": tool_context.idempotency_key})
        os.kill(os.getpid(), signal.SIGKILL)
        return "never"

    async def main() -> None:
        agent = await Agent.create(
            model=ScriptedModel([[ToolCall("send", {"intent": "first"}, tool_use_id="call-1")]]),
            tools=[send],
            session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(root, durable=False)),
        )
        await agent.invoke_async("first")

    anyio.run(main)


def test_a_new_prompt_after_a_turn_killed_inside_a_tool_finishes_that_turn_first(
    service: EffectService, tmp_path: Any
) -> None:
    service.reset()
    process = multiprocessing.get_context("fork").Process(
        target=killed_inside_the_tool, args=(str(tmp_path), service.url)
    )
    process.start()
    process.join(60)
    assert process.exitcode == -signal.SIGKILL
    seen: list[list[dict[str, Any]]] = []

    def model(messages: list[dict[str, Any]], specs: Any) -> str:
        seen.append(list(messages))
        return "first is done" if len(seen) == 1 else "and another"

    agent = Agent(
        model=FunctionModel(model),
        tools=effect_tools(service.url),
        session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(str(tmp_path))),
    )
    assert agent.open_turn() == 0
    result = agent("another")
    assert result.resumed
    assert result.text == "and another"
    # The model was asked to finish the open turn with its tool's result, before it saw the new prompt.
    assert seen[0][-1]["content"][0]["toolResult"]["toolUseId"] == "call-1"
    assert seen[1][-1] == {"role": "user", "content": [{"text": "another"}]}
    assert dict(service.effects) == {"first": 1}
    reloaded = Agent(
        model=ScriptedModel([]),
        tools=effect_tools(service.url),
        session_manager=SnapshotSessionManager("s", storage=LocalFileStorage(str(tmp_path))),
    )
    assert reloaded.messages == agent.messages
    texts = [m["content"][0].get("text") for m in reloaded.messages]
    assert texts == ["first", None, None, "first is done", "another", "and another"]
    assert reloaded.open_turn() is None
    check_history(reloaded.messages, effect_tools(service.url))
