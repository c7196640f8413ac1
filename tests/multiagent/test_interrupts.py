"""Human in the loop: a tool, a function node or a before-node hook interrupts; the answer resumes the run."""

import pytest

from orchestra import Agent, ToolContext, tool
from orchestra.errors import RunError
from orchestra.multiagent import BeforeNodeCall, Graph, Status, Swarm
from orchestra.session import SnapshotSessionManager
from orchestra.testing import ScriptedModel, ToolCall

CALLS: list[str] = []


@tool(context=True)
def request_approval(draft: str, tool_context: ToolContext) -> str:
    """Ask a human to approve the draft.

    Args:
        draft: what to approve
    """
    CALLS.append("tool")
    answer = tool_context.interrupt("approval", reason={"draft": draft})
    return f"human said: {answer}"


def build(storage):
    writer = Agent(
        name="writer",
        model=ScriptedModel([ToolCall("request_approval", {"draft": "v1"}), "published v1"]),
        tools=[request_approval],
    )
    return Graph(
        {"research": lambda i: "facts", "writer": writer, "after": lambda i: f"after: {i.inputs['writer']}"},
        edges=[("research", "writer"), ("writer", "after")],
        session_manager=SnapshotSessionManager("s1", storage=storage),
    )


async def test_a_tool_interrupt_stops_the_run_and_the_answer_resumes_it_in_a_new_process(storage):
    CALLS.clear()
    first = await build(storage).invoke_async("write it")
    assert first.status == Status.INTERRUPTED
    assert [i.name for i in first.interrupts] == ["approval"]
    assert first.interrupts[0].reason == {"draft": "v1"}
    assert first.results["writer"].status == Status.INTERRUPTED

    resumed_graph = build(storage)  # new objects over the same storage: a new process
    writer_model = resumed_graph.nodes["writer"].agent.model
    writer_model.replies = ["published v1"]  # the pending tool call resumes without asking the model again
    result = await resumed_graph.invoke_async([first.interrupts[0].to_response("approved")])
    assert result.status == Status.COMPLETED
    assert result.results["after"].output == "after: published v1"
    assert CALLS == ["tool", "tool"]
    writer = resumed_graph.nodes["writer"].agent
    tool_result = writer.messages[2]["content"][0]["toolResult"]
    assert tool_result["content"] == [{"text": "human said: approved"}]
    assert len(writer_model.requests) == 1


def test_a_before_node_hook_can_interrupt():
    asked = []

    class Gate:
        def register_hooks(self, registry):
            registry.add_callback(BeforeNodeCall, self.before)

        def before(self, event):
            if event.node_id == "publish":
                answer = event.interrupt("publish?", reason="the draft is ready")
                asked.append(answer)
                if answer != "yes":
                    event.cancel_node = "a human declined"

    graph = Graph(
        {"draft": lambda i: "text", "publish": lambda i: "published"},
        edges=[("draft", "publish")],
        hooks=[Gate()],
    )
    first = graph("go")
    assert first.status == Status.INTERRUPTED
    assert first.interrupts[0].reason == "the draft is ready"
    result = graph([first.interrupts[0].to_response("yes")])
    assert result.status == Status.COMPLETED
    assert result.results["publish"].output == "published"
    assert asked == ["yes"]


def test_a_function_node_can_interrupt():
    def confirm(node_input):
        amount = node_input.interrupt("confirm amount", reason=100)
        return f"charged {amount}"

    graph = Graph({"confirm": confirm})
    first = graph("charge")
    assert first.status == Status.INTERRUPTED
    assert str(graph([first.interrupts[0].to_response(90)])) == "charged 90"


def test_a_swarm_agent_can_interrupt():
    @tool(context=True)
    def ask(question: str, tool_context: ToolContext) -> str:
        """Ask the user.

        Args:
            question: the question
        """
        return str(tool_context.interrupt("ask", reason=question))

    support = Agent(
        name="support",
        model=ScriptedModel([ToolCall("ask", {"question": "order id?"}), "found order 7"]),
        tools=[ask],
    )
    swarm = Swarm([support])
    first = swarm("where is my order")
    assert first.status == Status.INTERRUPTED
    result = swarm([first.interrupts[0].to_response("7")])
    assert result.status == Status.COMPLETED
    assert str(result) == "found order 7"


def test_responses_must_match_an_open_interrupt():
    graph = Graph({"a": lambda i: "x"})
    with pytest.raises(RunError, match="not interrupted"):
        graph([{"interruptResponse": {"interruptId": "int-x", "response": 1}}])
    interrupted = Graph({"c": lambda i: i.interrupt("q")})
    interrupted("t")
    with pytest.raises(RunError, match="no open interrupt 'int-unknown'"):
        interrupted([{"interruptResponse": {"interruptId": "int-unknown", "response": 1}}])
