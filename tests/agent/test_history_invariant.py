"""Property test: whatever happens in an invocation, the next request is one both providers accept.

Random sequences of steps (model replies: text, blank text, tool calls that succeed, fail, return
nothing, interrupt or hang; model errors and context overflows; cancellations; streams abandoned at a
random event; direct tool calls; interrupt answers) run on one agent with a session. After every step:

- the history satisfies ``orchestra.history``'s invariant and the agent is free;
- the next request (a new user message, or the answers to open interrupts) passes botocore's
  validation of Bedrock's ConverseStream and the ``openai`` package's Chat Completions types, with the
  conversation rules of both;
- the session, loaded into a new agent, holds a history that satisfies the invariant too, or an open turn
  (a save cancelled half way) whose resume sends a request both providers accept.

``ORCHESTRA_STRESS=1`` runs 2,000 examples instead of 200.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra import Agent, ToolContext, tool
from orchestra.conversation import SlidingWindowConversationManager
from orchestra.errors import ContextWindowOverflowError, ModelError, OrchestraError
from orchestra.history import history_problems
from orchestra.models.bedrock import BedrockModel
from orchestra.models.openai import OpenAIModel
from orchestra.session import SnapshotSessionManager
from orchestra.storage import InMemoryStorage
from orchestra.testing import FunctionModel, ToolCall
from tests.models.provider_rules import bedrock_problems, openai_problems

EXAMPLES = 2000 if os.environ.get("ORCHESTRA_STRESS") == "1" else 200
BEDROCK = BedrockModel("anthropic.claude-3-5-sonnet-20240620-v1:0", region_name="us-east-1")
OPENAI = OpenAIModel("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="k")

TOOLS = ["ok", "boom", "empty", "ask", "hang"]
tool_call = st.sampled_from(TOOLS).map(lambda name: ("tool", name))
model_turn = st.one_of(
    st.sampled_from(["hello", "", "   "]).map(lambda text: ("text", text)),
    st.tuples(st.sampled_from(["", " ", "thinking"]), st.lists(tool_call, min_size=1, max_size=3)).map(
        lambda t: ("tools", t)
    ),
    st.just(("error", None)),
    st.just(("overflow", None)),
)
step = st.one_of(
    st.tuples(st.just("invoke"), st.lists(model_turn, max_size=5)),
    st.tuples(st.just("abandon"), st.lists(model_turn, max_size=5), st.integers(0, 8)),
    st.tuples(st.just("direct"), st.sampled_from(["ok", "boom", "empty"])),
    st.tuples(st.just("answer"), st.lists(model_turn, max_size=3)),
)


class World:
    """One agent, its scripted model and its session; a step's model turns are queued in ``script``."""

    def __init__(self) -> None:
        self.script: list[tuple[str, Any]] = []
        self.scope: anyio.CancelScope | None = None
        self.storage = InMemoryStorage()

    def reply(self, messages: list[dict[str, Any]], specs: list[Any]) -> Any:
        if not self.script:
            return "done"
        kind, value = self.script.pop(0)
        if kind == "text":
            return value
        if kind == "tools":
            text, calls = value
            return [text, *(ToolCall(name, {}) for _, name in calls)]
        if kind == "error":
            raise ModelError("scripted: the provider failed")
        raise ContextWindowOverflowError("scripted: too long")

    def tools(self) -> list[Any]:
        @tool
        def ok() -> str:
            """Succeeds."""
            return "fine"

        @tool
        def boom() -> str:
            """Fails."""
            raise RuntimeError("boom")

        @tool
        def empty() -> str:
            """Returns nothing."""
            return ""

        @tool(context=True)
        def ask(tool_context: ToolContext) -> str:
            """Asks a human."""
            return str(tool_context.interrupt("approve", reason="ok?"))

        @tool
        async def hang() -> str:
            """Never returns: the caller's timeout fires while it runs."""
            assert self.scope is not None
            self.scope.cancel()
            await anyio.sleep_forever()
            return "never"

        return [ok, boom, empty, ask, hang]

    async def agent(self) -> Agent:
        return await Agent.create(
            model=FunctionModel(self.reply),
            tools=self.tools(),
            conversation_manager=SlidingWindowConversationManager(window_size=8),
            session_manager=SnapshotSessionManager("s", storage=self.storage, save_latest_on="message"),
            max_cycles=3,
        )


def answers(agent: Agent) -> list[dict[str, Any]]:
    assert agent.pending_tools is not None
    return [
        {"interruptResponse": {"interruptId": i.id, "response": "yes"}}
        for i in agent.pending_tools.interrupts.values()
        if i.response is None
    ]


def next_request(agent: Agent) -> list[dict[str, Any]]:
    """The messages of the next model request this agent can make."""
    if agent.pending_tools is None:
        return [*agent.messages, {"role": "user", "content": [{"text": "next"}]}]
    uses = agent.pending_tools.tool_uses
    results = [
        {"toolResult": {"toolUseId": u["toolUseId"], "status": "success", "content": [{"text": "r"}]}}
        for u in uses
    ]
    return [*agent.messages, {"role": "user", "content": results}]


def check(agent: Agent) -> None:
    interrupted = agent.pending_tools is not None
    assert history_problems(agent.messages, interrupted=interrupted) == []
    with agent.exclusive("check"):  # raises ConcurrencyError if the step left the agent held
        pass
    messages = next_request(agent)
    specs = agent.tool_registry.specs()
    assert bedrock_problems(BEDROCK.request_body(messages, specs, "be brief")) == []
    assert openai_problems(OPENAI.request_body(messages, specs, "be brief")) == []


async def run_step(world: World, agent: Agent, action: tuple[Any, ...]) -> None:
    kind = action[0]
    if kind == "direct":
        try:
            await getattr(agent.tool, action[1]).call_async()
        except OrchestraError:
            assert agent.pending_tools is not None  # refused only while interrupted
        return
    world.script = list(action[1])
    prompt: Any = "go"
    if agent.pending_tools is not None:
        prompt = answers(agent) if kind == "answer" else "go"
    with anyio.CancelScope() as scope:
        world.scope = scope
        try:
            if kind == "abandon":
                seen = 0
                async for _ in agent.stream_async(prompt):
                    seen += 1
                    if seen > action[2]:
                        break
            else:
                await agent.invoke_async(prompt)
        except OrchestraError:
            pass


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(step, min_size=1, max_size=6))
def test_every_step_leaves_a_history_both_providers_accept(steps: list[tuple[Any, ...]]) -> None:
    async def scenario() -> None:
        world = World()
        agent = await world.agent()
        for action in steps:
            await run_step(world, agent, action)
            check(agent)
            reloaded = await Agent.create(
                model=FunctionModel(world.reply),
                tools=world.tools(),
                session_manager=SnapshotSessionManager("s", storage=world.storage),
            )
            open_turn = reloaded.open_turn()
            if open_turn is None:
                assert (
                    history_problems(reloaded.messages, interrupted=reloaded.pending_tools is not None) == []
                )
            else:
                # A turn left open by a cancelled save is resumed by the next invocation: the whole turns
                # before it keep the invariant, and the request the resume makes passes both providers.
                assert history_problems(reloaded.messages[:open_turn]) == []
                request = next_request(reloaded) if reloaded.pending_tools else reloaded.messages
                specs = reloaded.tool_registry.specs()
                assert bedrock_problems(BEDROCK.request_body(request, specs, "be brief")) == []
                assert openai_problems(OPENAI.request_body(request, specs, "be brief")) == []

    anyio.run(scenario)


@pytest.mark.parametrize("text", ["", "  \n"])
def test_a_blank_prompt_is_refused_before_anything_happens(text: str) -> None:
    agent = Agent(model=FunctionModel(lambda m, s: "hi"))
    with pytest.raises(ValueError, match="must not be blank"):
        agent(text)
    assert agent.messages == []
