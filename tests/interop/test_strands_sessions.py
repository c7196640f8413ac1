"""Repository sessions cross between orchestra and the real Strands Agents SDK, both ways, on files and S3.

A Strands agent (a scripted Strands ``Model``, nothing else faked) writes a session that orchestra loads and
continues, and the reverse. What Strands then sends its model is checked with Strands' own Bedrock
formatter and botocore's ConverseStream shape. Needs the ``interop`` extra (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import pytest

if not os.environ.get("ORCHESTRA_REQUIRE_STRANDS"):  # .ci/run sets it: there, a missing package fails
    pytest.importorskip("strands", reason="pip install 'orchestra[interop]' (the real Strands Agents SDK)")

import strands
from strands.models.bedrock import BedrockModel
from strands.session.file_session_manager import FileSessionManager as StrandsFiles
from strands.session.s3_session_manager import S3SessionManager as StrandsS3

from orchestra import Agent, ScriptedModel, ToolCall, tool
from orchestra.history import history_problems
from orchestra.hooks import TurnCheckpoint
from orchestra.session import FileSessionManager, S3SessionManager
from tests.interop.strands_stub import ScriptedStrandsModel
from tests.models.provider_rules import bedrock_problems

PNG = b"\x89PNG\r\n\x1a\n\x00binary"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first
        b: the second
    """
    return a + b


@strands.tool
def strands_add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first
        b: the second
    """
    return a + b


strands_add.tool_spec["name"] = "add"  # the same tool under the same name in both frameworks


@pytest.fixture(params=["files", "s3"])
def where(request: pytest.FixtureRequest, tmp_path) -> dict[str, Any]:
    if request.param == "files":
        return {"kind": "files", "dir": str(tmp_path)}
    bucket = request.getfixturevalue("s3_bucket")
    return {"kind": "s3", "bucket": bucket, "url": request.getfixturevalue("moto_url")}


def orchestra_manager(where: dict[str, Any], session_id: str) -> Any:
    if where["kind"] == "files":
        return FileSessionManager(session_id, storage_dir=where["dir"])
    return S3SessionManager(session_id, where["bucket"], prefix="team/a", endpoint_url=where["url"])


def strands_manager(where: dict[str, Any], session_id: str) -> Any:
    if where["kind"] == "files":
        return StrandsFiles(session_id, storage_dir=where["dir"])
    return StrandsS3(
        session_id, where["bucket"], prefix="team/a", endpoint_url=where["url"], region_name="us-east-1"
    )


def strands_agent(where: dict[str, Any], session_id: str, turns: list[Any]) -> Any:
    return strands.Agent(
        agent_id="helper",
        model=ScriptedStrandsModel(turns),
        tools=[strands_add],
        session_manager=strands_manager(where, session_id),
        callback_handler=None,
    )


def core(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages without Strands' own extras (``tracking_id``, ``metadata``), which orchestra does not keep."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def assert_bedrock_accepts(messages: list[dict[str, Any]]) -> None:
    """Strands' own Bedrock formatter takes the history, and botocore's ConverseStream shape accepts it."""
    request = BedrockModel(region_name="us-east-1", model_id="test-model").format_request(
        messages, tool_specs=[strands_add.tool_spec]
    )
    assert bedrock_problems(request) == []


def test_orchestra_continues_a_session_strands_wrote_and_strands_continues_it_again(where):
    first = strands_agent(where, "s1", [("add", "t1", {"a": 1, "b": 2}), "three"])
    first.state.set("plan", {"step": 1})
    first([{"text": "add 1 and 2"}, {"image": {"format": "png", "source": {"bytes": PNG}}}])
    written_by_strands = core(first.messages)

    agent = Agent(
        model=ScriptedModel([ToolCall("add", {"a": 3, "b": 4}, tool_use_id="t2"), "seven"]),
        tools=[add],
        agent_id="helper",
        session_manager=orchestra_manager(where, "s1"),
    )
    assert agent.messages == written_by_strands  # bytes are bytes again, tool calls are intact
    assert agent.state.get() == {"plan": {"step": 1}}
    assert agent("and 3 and 4?").message["content"] == [{"text": "seven"}]
    assert history_problems(agent.messages) == []

    again = strands_agent(where, "s1", ["done"])
    assert core(again.messages) == agent.messages
    assert again.state.get() == {"plan": {"step": 1}}
    again("anything else?")
    sent = again.model.seen[-1]
    assert core(sent)[: len(agent.messages)] == agent.messages
    assert_bedrock_accepts(sent)


def test_strands_continues_a_session_orchestra_wrote_and_orchestra_continues_it_again(where):
    agent = Agent(
        model=ScriptedModel([ToolCall("add", {"a": 1, "b": 2}, tool_use_id="t1"), "three"]),
        tools=[add],
        agent_id="helper",
        state={"user": "ana"},
        session_manager=orchestra_manager(where, "s2"),
    )
    agent([{"text": "add 1 and 2"}, {"image": {"format": "png", "source": {"bytes": PNG}}}])

    follower = strands_agent(where, "s2", [("add", "t2", {"a": 3, "b": 4}), "seven"])
    assert core(follower.messages) == agent.messages
    assert follower.state.get() == {"user": "ana"}
    follower("and 3 and 4?")
    assert_bedrock_accepts(follower.model.seen[0])

    back = Agent(
        model=ScriptedModel(["bye"]),
        tools=[add],
        agent_id="helper",
        session_manager=orchestra_manager(where, "s2"),
    )
    assert back.messages == core(follower.messages)
    assert back.messages[-1]["content"] == [{"text": "seven"}]
    back("thanks")
    assert history_problems(back.messages) == []


def test_strands_loads_an_orchestra_agent_that_has_no_messages_yet(where):
    Agent(
        model=ScriptedModel([]),
        agent_id="helper",
        state={"k": 1},
        session_manager=orchestra_manager(where, "s3"),
    )
    follower = strands_agent(where, "s3", ["hello"])
    assert follower.messages == []
    assert follower.state.get() == {"k": 1}
    follower("hi")
    assert len(follower.messages) == 2


def test_a_redaction_made_by_orchestra_is_what_strands_shows(where):
    agent = Agent(model=ScriptedModel([]), agent_id="helper", session_manager=orchestra_manager(where, "s4"))

    async def go() -> None:
        await agent.append_message({"role": "user", "content": [{"text": "my card is 4111 1111"}]})
        await agent.redact_latest_message("[card removed]")
        await agent.append_message({"role": "assistant", "content": [{"text": "noted"}]})

    anyio.run(go)
    follower = strands_agent(where, "s4", [])
    assert follower.messages[0]["content"] == [{"text": "[card removed]"}]


def test_an_open_turn_orchestra_left_loads_in_strands_and_resumes_in_orchestra(where):
    """A process killed in the middle of a turn (a side-effecting tool had run, another had not) leaves an
    open turn in the shared layout. Strands loads that session as it is, and closes the unanswered call
    with an error result of its own when its next prompt arrives. orchestra loads it as an open turn and
    resumes it: the recorded result is reused, not run again."""
    ran: list[str] = []

    @tool(effects=True, name="add")
    def recorded_add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append("add")
        return a + b

    @tool
    async def slow(query: str) -> str:
        """Never returns: the process dies here."""
        await anyio.sleep_forever()
        return "never"

    async def die_mid_turn(session_id: str) -> list[dict[str, Any]]:
        agent = await Agent.create(
            model=ScriptedModel(
                [
                    [
                        ToolCall("add", {"a": 1, "b": 2}, tool_use_id="t1"),
                        ToolCall("slow", {"query": "q"}, tool_use_id="t2"),
                    ]
                ]
            ),
            tools=[recorded_add, slow],
            agent_id="helper",
            session_manager=orchestra_manager(where, session_id),
        )
        saved = anyio.Event()
        checkpoints = 0

        async def after_checkpoint(event: TurnCheckpoint) -> None:
            nonlocal checkpoints
            checkpoints += 1
            if checkpoints == 2:  # add's result is saved (the session manager's callback ran first)
                saved.set()

        agent.hooks.add_callback(TurnCheckpoint, after_checkpoint)
        # The process "dies" once add's result is durable and slow is still running: waiting for the
        # checkpoint, not for a fixed time, so a loaded machine cannot cut the turn before add ran.
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(agent.invoke_async, "add 1 and 2")
            await saved.wait()
            tasks.cancel_scope.cancel()
        return agent.messages

    left = anyio.run(die_mid_turn, "open-strands")
    strands_side = strands_agent(where, "open-strands", ["three"])
    assert core(strands_side.messages) == left  # loaded as it is: the prompt and the tool calls
    strands_side("and then?")
    closed = [b["toolResult"] for m in core(strands_side.messages) for b in m["content"] if "toolResult" in b]
    assert {r["toolUseId"] for r in closed} == {"t1", "t2"}  # Strands answered the calls itself
    assert all(r["status"] == "error" for r in closed)

    anyio.run(die_mid_turn, "open")
    assert ran == ["add", "add"]  # once in each session
    resumed = Agent(
        model=ScriptedModel(["three; the lookup found nothing"]),
        tools=[recorded_add, tool(lambda query: "nothing", name="slow")],
        agent_id="helper",
        session_manager=orchestra_manager(where, "open"),
    )
    assert resumed.open_turn() == 0
    result = resumed("add 1 and 2")
    assert result.resumed
    assert ran == ["add", "add"]  # the recorded result was reused
    assert history_problems(resumed.messages) == []
    assert_bedrock_accepts([*resumed.messages, {"role": "user", "content": [{"text": "next"}]}])
