"""Loading pipelines from YAML: examples, round trips, includes, conditions, overrides, sessions, schema."""

import json
from pathlib import Path

import pytest

import orchestra
from orchestra import Agent, FunctionModel
from orchestra.errors import ConfigurationError, OrchestraSpecError
from orchestra.multiagent import Graph, Status, Swarm
from orchestra.spec import json_schema, load, parse_file, parse_text

EXAMPLES = Path(__file__).parent.parent.parent / "examples" / "graphs"


@pytest.mark.parametrize("name", ["review_loop", "fan_out", "support_swarm", "nested"])
def test_every_example_loads_validates_and_runs(name):
    pipeline = load(EXAMPLES / f"{name}.yaml")
    result = pipeline(pipeline.spec.input)
    assert result.status == Status.COMPLETED
    assert result.output


def test_load_is_exported_at_the_top():
    assert orchestra.load is load


def test_review_loop_loops_until_approved():
    graph = Graph.from_yaml(str(EXAMPLES / "review_loop.yaml"))
    result = graph(graph.spec.input)
    assert result.execution_order == ["researcher", "writer", "reviewer", "writer", "reviewer"]
    assert result.results["reviewer"].output == "APPROVED"


def test_from_yaml_checks_the_kind():
    with pytest.raises(ConfigurationError, match="describes a Swarm, not a Graph"):
        Graph.from_yaml(str(EXAMPLES / "support_swarm.yaml"))
    assert isinstance(Swarm.from_yaml(str(EXAMPLES / "support_swarm.yaml")), Swarm)


@pytest.mark.parametrize("name", ["review_loop", "fan_out", "support_swarm", "nested"])
def test_to_yaml_writes_back_a_spec_that_loads_to_the_same_pipeline(name, tmp_path):
    original = load(EXAMPLES / f"{name}.yaml")
    copy = EXAMPLES / f".roundtrip_{name}.yaml"
    try:
        copy.write_text(original.to_yaml())
        again = load(copy)
    finally:
        copy.unlink()
    assert type(again) is type(original)
    assert again.topology_hash() == original.topology_hash()
    assert again.spec == original.spec
    assert {n: node.kind for n, node in again.nodes.items()} == {
        n: node.kind for n, node in original.nodes.items()
    }


def test_a_graph_built_in_python_has_no_yaml():
    with pytest.raises(ConfigurationError, match="built in Python"):
        Graph({"a": lambda i: 1}).to_yaml()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_included_file_is_resolved_relative_to_the_spec(tmp_path):
    (tmp_path / "sub").mkdir()
    write(
        tmp_path / "sub",
        "inner.yaml",
        "version: 1\nkind: graph\nid: inner\nnodes: [{id: f, function: 'helpers_inner:twice'}]\n",
    )
    write(tmp_path / "sub", "helpers_inner.py", "def twice(node_input):\n    return node_input.task * 2\n")
    outer = write(
        tmp_path,
        "outer.yaml",
        "version: 1\nkind: graph\nid: outer\nnodes: [{id: inner, file: sub/inner.yaml}]\n",
    )
    result = load(outer)("ab")
    assert result.output == "abab"


def test_an_include_cycle_is_an_error(tmp_path):
    write(tmp_path, "a.yaml", "version: 1\nkind: graph\nid: a\nnodes: [{id: b, file: b.yaml}]\n")
    write(tmp_path, "b.yaml", "version: 1\nkind: graph\nid: b\nnodes: [{id: a, file: a.yaml}]\n")
    with pytest.raises(OrchestraSpecError, match=r"includes itself \(a.yaml -> b.yaml -> a.yaml\)"):
        parse_file(tmp_path / "a.yaml")


def test_errors_in_an_included_file_name_that_file(tmp_path):
    write(tmp_path, "inner.yaml", "version: 1\nkind: graph\nid: inner\nnodes: []\n")
    outer = write(
        tmp_path, "outer.yaml", "version: 1\nkind: graph\nid: outer\nnodes: [{id: x, file: inner.yaml}]\n"
    )
    with pytest.raises(OrchestraSpecError) as info:
        parse_file(outer)
    assert (
        info.value.errors[0] == f"{outer}:4:23: nodes[0].file: the included spec 'inner.yaml' is not valid:"
    )
    assert info.value.errors[1] == f"{tmp_path / 'inner.yaml'}:4:8: nodes: a graph needs at least one node"


def test_a_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(OrchestraSpecError, match="cannot read the file"):
        parse_file(tmp_path / "nope.yaml")


def test_environment_variables_are_interpolated(monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_PROMPT", "be brief")
    text = "version: 1\nkind: agent\nid: a\nagents:\n  - name: a\n    system_prompt: ${ORCHESTRA_TEST_PROMPT}, always\n"
    agent = parse_text(text, "a.yaml")
    from orchestra.spec import build

    assert build(agent).system_prompt == "be brief, always"


def test_model_override_from_the_cli_and_the_environment(monkeypatch):
    text = "version: 1\nkind: agent\nid: a\nagents:\n  - name: a\n    model: {provider: scripted, replies: [from the file]}\n"
    from orchestra.spec import build

    loaded = parse_text(text, "a.yaml")
    assert str(build(loaded)("hi")) == "from the file"
    assert str(build(loaded, model="echo")("hi")) == "echo: hi"
    monkeypatch.setenv("ORCHESTRA_MODEL", "echo")
    assert str(build(loaded)("ping")) == "echo: ping"
    override = FunctionModel(lambda m, s: "from python")
    assert str(build(loaded, model=override)("x")) == "from python"


def test_kind_agent_builds_an_agent_with_tools_state_and_manager():
    text = (
        "version: 1\nkind: agent\nid: helper\nagents:\n  - name: helper\n    tools: [notebook]\n"
        "    state: {k: 1}\n    conversation_manager: {type: sliding_window, window_size: 6}\n"
        "    model: {provider: scripted, replies: [{tool: notebook, input: {mode: create, name: n, new_str: hi}}, done]}\n"
    )
    from orchestra.spec import build

    agent = build(parse_text(text, "a.yaml"))
    assert isinstance(agent, Agent)
    assert str(agent("note it")) == "done"
    assert agent.state.get("notebooks") == {"n": "hi"}
    assert agent.state.get("k") == 1
    assert agent.conversation_manager.window_size == 6


CONDITIONS = """version: 1
kind: graph
id: conditions
state: {mode: fast}
nodes:
  - {id: source, function: 'tests.support:spec_source'}
  - {id: contains, function: 'tests.support:spec_mark'}
  - {id: matches, function: 'tests.support:spec_mark'}
  - {id: state_eq, function: 'tests.support:spec_mark'}
  - {id: status, function: 'tests.support:spec_mark'}
  - {id: combined, function: 'tests.support:spec_mark'}
  - {id: negated, function: 'tests.support:spec_mark'}
  - {id: called, function: 'tests.support:spec_mark'}
  - {id: never, function: 'tests.support:spec_mark'}
edges:
  - {from: source, to: contains, when: {output_contains: APPROVED}}
  - {from: source, to: matches, when: {output_matches: 'v[0-9]+'}}
  - {from: source, to: state_eq, when: {state_equals: {mode: fast}}}
  - {from: source, to: status, when: {status: {source: completed}}}
  - {from: source, to: combined, when: {all: [{output_contains: APPROVED}, {any: [{output_contains: nope}, {not: {output_contains: REJECTED}}]}]}}
  - {from: source, to: negated, when: {not: {output_contains: APPROVED}}}
  - {from: source, to: called, when: 'tests.support:spec_condition'}
  - {from: source, to: never, when: {output_contains: REJECTED}}
"""


def test_built_in_conditions():
    result = load_text(CONDITIONS)("go", invocation_state={"allow": True})
    assert result.status == Status.COMPLETED
    assert sorted(result.results) == [
        "called",
        "combined",
        "contains",
        "matches",
        "source",
        "state_eq",
        "status",
    ]


def load_text(text):
    from orchestra.spec import build

    return build(parse_text(text, "conditions.yaml"))


def test_a_session_is_attached_with_the_spec_settings(tmp_path):
    text = (
        f"version: 1\nkind: graph\nid: g\nsession: {{storage: 'file:{tmp_path}/store', save_on: invocation}}\n"
        "nodes: [{id: f, function: 'tests.support:spec_source'}]\n"
    )
    from orchestra.spec import build

    graph = build(parse_text(text, "g.yaml"), session_id="s1")
    assert graph.session_manager.multi_agent_save_latest_on == "invocation"
    graph("go")
    assert (tmp_path / "store/session/s1/scopes/multiAgent/g/snapshots/snapshot_latest.json").is_file()
    other = build(parse_text(text, "g.yaml"), session_id="s2", storage=f"file:{tmp_path}/elsewhere")
    other("go")
    assert (tmp_path / "elsewhere/session/s2").is_dir()


def test_the_json_schema_describes_the_spec():
    schema = json_schema()
    assert schema["title"] == "orchestra pipeline spec, version 1"
    assert set(schema["required"]) == {"kind", "id"}
    assert "nodes" in schema["properties"]
    model = schema["$defs"]["AgentSpec"]["properties"]["model"]
    assert {"type": "string"} in model["anyOf"][0]["anyOf"]  # "openai:gpt-4o" is a model too
    json.dumps(schema)


def test_yaml_reference_is_generated_from_the_schema():
    from scripts.gen_yaml_reference import render

    current = (Path(__file__).parent.parent.parent / "docs" / "yaml-reference.md").read_text()
    assert current == render(), "docs/yaml-reference.md is stale: run python scripts/gen_yaml_reference.py"
