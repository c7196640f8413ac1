from orchestra import Agent
from orchestra.tools import notebook


def text(result):
    return result["content"][0]["text"]


def test_notebook_modes_keep_notes_in_agent_state():
    agent = Agent(tools=[notebook])
    assert text(agent.tool.notebook(mode="list")) == "(no notes)"
    agent.tool.notebook(mode="create", name="ideas", new_str="# Project ideas")
    agent.tool.notebook(mode="write", name="ideas", new_str="- a durable pipeline")
    agent.tool.notebook(mode="write", name="ideas", new_str="- first", insert_line=2)
    agent.tool.notebook(mode="write", name="ideas", old_str="durable", new_str="resumable")
    assert (
        text(agent.tool.notebook(mode="read", name="ideas"))
        == "# Project ideas\n- first\n- a resumable pipeline"
    )
    agent.tool.notebook(mode="create", name="todo")
    assert text(agent.tool.notebook(mode="list")) == "ideas\ntodo"
    assert agent.state.get("notebooks")["ideas"].startswith("# Project ideas")
    agent.tool.notebook(mode="delete", name="todo")
    assert set(agent.state.get("notebooks")) == {"ideas"}


def test_notebook_errors_are_error_results():
    agent = Agent(tools=[notebook])
    missing = agent.tool.notebook(mode="read", name="nope")
    assert missing["status"] == "error"
    assert "no note named 'nope'" in text(missing)
    agent.tool.notebook(mode="create", name="a")
    assert "already exists" in text(agent.tool.notebook(mode="create", name="a"))
    assert "does not occur" in text(agent.tool.notebook(mode="write", name="a", old_str="x", new_str="y"))
    assert agent.tool.notebook(mode="shred")["status"] == "error"
