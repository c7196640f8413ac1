import pytest

from orchestra import Agent
from orchestra.agent import JSONState
from orchestra.testing import ScriptedModel


def test_get_set_delete_and_whole_dict():
    agent = Agent(state={"user_preferences": {"theme": "dark"}, "session_count": 0})
    assert agent.state.get("user_preferences") == {"theme": "dark"}
    agent.state.set("last_action", "login")
    agent.state.set("session_count", 1)
    assert agent.state.get() == {
        "user_preferences": {"theme": "dark"},
        "session_count": 1,
        "last_action": "login",
    }
    agent.state.delete("last_action")
    assert agent.state.get("last_action") is None
    assert "last_action" not in agent.state
    agent.state.delete("never-there")  # deleting an absent key is harmless


@pytest.mark.parametrize(
    "value", ["hello", 42, 3.5, True, [1, 2, 3], {"nested": "data"}, None], ids=lambda v: type(v).__name__
)
def test_json_values_are_accepted(value):
    agent = Agent()
    agent.state.set("key", value)
    assert agent.state.get("key") == value


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (lambda x: x, "function"),
        ({1, 2}, "set"),
        (object(), "object"),
        (float("nan"), "float"),
        (b"x", "bytes"),
    ],
)
def test_non_json_values_raise_value_error_naming_key_and_type(value, type_name):
    agent = Agent(name="keeper")
    with pytest.raises(ValueError, match=rf"'keeper' state: the value for key 'bad' .*type {type_name}"):
        agent.state.set("bad", value)
    assert "bad" not in agent.state


def test_initial_state_is_validated():
    with pytest.raises(ValueError, match="key 'f'"):
        Agent(state={"f": print})


def test_non_string_keys_are_refused():
    with pytest.raises(ValueError, match="keys must be strings"):
        JSONState().set(1, "x")  # type: ignore[arg-type]


def test_get_returns_copies():
    agent = Agent(state={"prefs": {"theme": "dark"}, "items": [1]})
    prefs = agent.state.get("prefs")
    prefs["theme"] = "light"
    everything = agent.state.get()
    everything["items"].append(2)
    assert agent.state.get("prefs") == {"theme": "dark"}
    assert agent.state.get("items") == [1]


def test_set_stores_a_copy():
    value = {"a": [1]}
    state = JSONState({"v": value})
    value["a"].append(2)
    assert state.get("v") == {"a": [1]}


def test_version_counts_changes():
    state = JSONState()
    state.set("a", 1)
    state.delete("a")
    state.delete("a")
    assert state.version == 2


def test_state_is_never_sent_to_the_model():
    model = ScriptedModel(["ok"])
    agent = Agent(model=model, state={"secret": "s3cr3t-value"})
    agent("hello")
    request = model.requests[0]
    assert "s3cr3t-value" not in repr(request.messages)
    assert "s3cr3t-value" not in repr(request.system_prompt)
    assert "s3cr3t-value" not in repr(request.tool_specs)
