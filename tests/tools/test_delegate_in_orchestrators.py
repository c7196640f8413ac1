"""An agent used as a tool by an orchestrator's agent node is saved with the run and restored on resume."""

from orchestra import Agent
from orchestra.models import ScriptedModel
from orchestra.models.scripted import ToolCall
from orchestra.multiagent import GraphBuilder, Status, Swarm
from orchestra.session import SnapshotSessionManager, admin
from orchestra.storage import LocalFileStorage


def hand_off(to):
    return ToolCall("handoff_to_agent", {"agent_name": to, "message": "yours"})


def team(storage, lead_replies, check_replies, helper_replies):
    helper = Agent(name="helper", model=ScriptedModel(helper_replies))
    lead = Agent(name="lead", model=ScriptedModel(lead_replies), tools=[helper.as_tool()])
    check = Agent(name="check", model=ScriptedModel(check_replies))
    swarm = Swarm([lead, check], session_manager=SnapshotSessionManager("s", storage=storage))
    return swarm, helper


async def test_a_swarm_resume_gives_the_tool_agent_its_conversation_back(tmp_path):
    storage = LocalFileStorage(tmp_path)
    first, helper = team(
        storage, [ToolCall("helper", {"input": "first question"}), hand_off("check")], [], ["one"]
    )
    result = await first.invoke_async("task")
    assert result.status == Status.FAILED  # "check" has no reply: the run stops there
    assert len(helper.messages) == 2

    # Another process: "check" hands back to "lead", which asks its helper again.
    second, helper = team(
        storage,
        [ToolCall("helper", {"input": "second question"}), "all done"],
        [hand_off("lead")],
        ["two"],
    )
    result = await second.invoke_async("task", resume_unfinished=True)
    assert result.status == Status.COMPLETED, result.reason
    texts = [block["text"] for message in helper.messages for block in message["content"]]
    assert texts == ["first question", "one", "second question", "two"]


async def test_a_graph_saves_its_node_s_tool_agent_in_the_run(tmp_path):
    storage = LocalFileStorage(tmp_path)
    helper = Agent(name="helper", model=ScriptedModel(["helped"]))
    boss = Agent(
        name="boss",
        model=ScriptedModel([ToolCall("helper", {"input": "help me"}), "done"]),
        tools=[helper.as_tool()],
    )
    graph = (
        GraphBuilder()
        .add_node(boss, "boss")
        .set_session_manager(SnapshotSessionManager("g", storage=storage))
        .build()
    )
    assert (await graph.invoke_async("task")).status == Status.COMPLETED
    doc = await admin.load_scope(storage, "g", "multiAgent", graph.id)
    saved = doc.logs["agent/boss/tools/helper/messages"]
    assert [m["content"][0]["text"] for m in saved] == ["help me", "helped"]
    assert "agent/boss/tools/helper" in doc.fields
    # The whole run, as serialize_state gives it, carries it too and gives it back.
    state = graph.serialize_state()
    copy_helper = Agent(name="helper", model=ScriptedModel(["again"]))
    copy_boss = Agent(
        name="boss",
        model=ScriptedModel([ToolCall("helper", {"input": "more"}), "ok"]),
        tools=[copy_helper.as_tool()],
    )
    copy = GraphBuilder().add_node(copy_boss, "boss").build()
    copy.deserialize_state(state)
    assert state["agent/boss/tools/helper/messages"][1]["content"][0]["text"] == "helped"
