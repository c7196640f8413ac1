"""Agents, graphs and swarms as tools: the caller's model delegates; the inner run shares the invocation
state and keeps its own conversation; its failures are error results, not exceptions."""

from __future__ import annotations

from orchestra import Agent, FunctionModel, ScriptedModel, ToolCall, tool
from orchestra.history import history_problems
from orchestra.multiagent import Graph, NodeInput
from orchestra.tools import DelegateTool, ToolContext


def test_an_agent_as_a_tool_answers_the_callers_model_with_its_own_conversation():
    @tool(context=True)
    def whoami(tool_context: ToolContext) -> str:
        """Who is asking."""
        return tool_context.invocation_state["user"]

    inner = Agent(
        name="researcher",
        description="Finds facts.",
        model=ScriptedModel([ToolCall("whoami"), "Paris, for ana"]),
        tools=[whoami],
    )
    delegate = inner.as_tool()
    assert isinstance(delegate, DelegateTool)
    assert delegate.spec["name"] == "researcher"
    assert delegate.spec["description"] == "Finds facts."
    caller = Agent(
        model=ScriptedModel([ToolCall("researcher", {"input": "capital of France?"}), "It is Paris."]),
        tools=[delegate],
    )
    result = caller("where?", invocation_state={"user": "ana"})
    assert str(result) == "It is Paris."
    tool_result = caller.messages[2]["content"][0]["toolResult"]
    assert (tool_result["status"], tool_result["content"]) == ("success", [{"text": "Paris, for ana"}])
    assert [m["role"] for m in inner.messages] == ["user", "assistant", "user", "assistant"]
    assert inner.messages[0]["content"] == [{"text": "capital of France?"}]  # its own conversation
    assert inner.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "ana"}]  # the caller's state
    assert history_problems(caller.messages) == history_problems(inner.messages) == []


def test_a_bare_agent_in_tools_is_its_as_tool():
    inner = Agent(name="helper", model=ScriptedModel(["done"]))
    caller = Agent(model=ScriptedModel([ToolCall("helper", {"input": "do it"}), "ok"]), tools=[inner])
    assert str(caller("go")) == "ok"
    assert caller.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "done"}]


def test_a_graph_as_a_tool_returns_its_output_and_a_failure_is_an_error_result():
    def shout(node_input: NodeInput) -> str:
        return str(node_input.task).upper()

    def boom(node_input: NodeInput) -> str:
        raise RuntimeError("the pipeline broke")

    caller = Agent(
        model=ScriptedModel(
            [ToolCall("shouter", {"input": "hello"}), ToolCall("broken", {"input": "x"}), "handled"]
        ),
        tools=[
            Graph({"shout": shout}, id="shouter").as_tool(),
            Graph({"boom": boom}, id="broken").as_tool(description="Always fails."),
        ],
    )
    assert str(caller("go")) == "handled"
    first = caller.messages[2]["content"][0]["toolResult"]
    second = caller.messages[4]["content"][0]["toolResult"]
    assert first["content"] == [{"text": "HELLO"}]
    assert second["status"] == "error"
    assert "broken did not complete" in second["content"][0]["text"]
    assert "the pipeline broke" in second["content"][0]["text"]


def test_an_inner_model_error_and_a_bad_input_are_error_results():
    def failing(messages, specs):
        raise ConnectionError("model endpoint down")

    inner = Agent(name="flaky", model=FunctionModel(failing))
    caller = Agent(
        model=ScriptedModel([ToolCall("flaky", {"input": "hi"}), ToolCall("flaky", {"input": " "}), "fine"]),
        tools=[inner.as_tool()],
    )
    assert str(caller("go")) == "fine"
    failed = caller.messages[2]["content"][0]["toolResult"]
    assert failed["status"] == "error"
    assert "flaky failed" in failed["content"][0]["text"]
    empty = caller.messages[4]["content"][0]["toolResult"]
    assert "needs a non-empty 'input' string" in empty["content"][0]["text"]


async def test_an_inner_agent_is_saved_in_the_callers_session_and_restored_after_a_restart(tmp_path):
    from orchestra.session import SnapshotSessionManager
    from orchestra.storage import LocalFileStorage

    def build():
        helper_model = ScriptedModel(["first answer", "second answer"], follow_history=True)
        helper = Agent(name="helper", model=helper_model, description="Answers.")
        caller = Agent(
            model=ScriptedModel(
                [
                    ToolCall("helper", {"input": "q1"}),
                    "done 1",
                    ToolCall("helper", {"input": "q2"}),
                    "done 2",
                ],
                follow_history=True,
            ),
            tools=[helper.as_tool()],
            session_manager=SnapshotSessionManager("s1", storage=LocalFileStorage(tmp_path)),
        )
        return caller, helper, helper_model

    caller, helper, _ = build()
    await caller.invoke_async("ask once")
    assert helper.agent_id == "default-helper"
    assert len(helper.messages) == 2

    caller, helper, helper_model = build()  # a new process: the same session, fresh objects
    await caller.invoke_async("ask again")
    assert str(helper.messages[-1]["content"][0]["text"]) == "second answer"
    assert helper_model.requests[-1].message_count == 3  # its first turn was restored before the call
    assert len(caller.messages) == 8
