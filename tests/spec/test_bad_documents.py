"""At least 30 bad YAML documents, each with its exact message: file:line:column: field: message."""

import pytest

from orchestra.errors import OrchestraSpecError
from orchestra.spec import parse_text

CASES = [
    pytest.param(
        "version: 1\nkind: [graph\nid: g\n",
        "pipeline.yaml:3:3: syntax: while parsing a flow sequence expected ',' or ']', but got ':'",
        id="syntax_flow",
    ),
    pytest.param(
        "version: 1\nkind: graph\n  id: g\n",
        "pipeline.yaml:3:5: syntax: mapping values are not allowed here",
        id="syntax_indent",
    ),
    pytest.param(
        "version: 1\nkind:\tgraph\nid: g\n\tbad: x\n",
        "pipeline.yaml:2:6: syntax: while scanning for the next token found character '\\t' that cannot start any token",
        id="syntax_tab",
    ),
    pytest.param(
        "- just\n- a list\n",
        "pipeline.yaml:1:1: (document): a pipeline is a mapping with version, kind, id, ...",
        id="not_a_mapping",
    ),
    pytest.param(
        "",
        "pipeline.yaml:1:1: (document): expected one YAML document, found no document",
        id="empty",
    ),
    pytest.param(
        "version: 1\n---\nversion: 1\n",
        "pipeline.yaml:1:1: (document): expected one YAML document, found 2 documents",
        id="two_documents",
    ),
    pytest.param(
        "version: 1\nkind: !!python/object/apply:os.system ['echo hi']\nid: g\n",
        "pipeline.yaml:2:7: kind: unsupported YAML tag 'tag:yaml.org,2002:python/object/apply:os.system': specs hold plain data only",
        id="python_tag",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nstate: &a {loop: *a}\n",
        "pipeline.yaml:4:8: state.loop: a YAML alias refers to itself (recursive document)",
        id="recursive_alias",
    ),
    pytest.param(
        "version: 1\nkind: graph\nkind: swarm\nid: g\nagents:\n  - name: a\n",
        "pipeline.yaml:3:1: kind: duplicate key 'kind'",
        id="duplicate_key",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nnodez: []\n",
        "pipeline.yaml:4:8: nodez: unknown key 'nodez' (did you mean 'nodes'?)",
        id="unknown_top_key",
    ),
    pytest.param(
        "version: 2\nkind: graph\nid: g\n",
        "pipeline.yaml:1:10: version: must be 1, not 2",
        id="wrong_version",
    ),
    pytest.param(
        "version: 1\nkind: grph\nid: g\n",
        "pipeline.yaml:2:7: kind: must be 'graph', 'swarm' or 'agent', not 'grph'",
        id="bad_kind",
    ),
    pytest.param(
        "version: 1\nkind: graph\n",
        "pipeline.yaml:1:1: id: is required",
        id="missing_id",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: has space\n",
        "pipeline.yaml:3:5: id: 'has space' is not a valid id: use 1-128 letters, digits, '.', '_' or '-'",
        id="bad_id",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    sytem_prompt: hi\n",
        "pipeline.yaml:6:19: agents[0].sytem_prompt: unknown key 'sytem_prompt' (did you mean 'system_prompt'?)",
        id="agent_unknown_key",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a/b\n",
        "pipeline.yaml:5:11: agents[0].name: 'a/b' is not a valid id: use 1-128 letters, digits, '.', '_' or '-'",
        id="agent_bad_name",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n  - name: a\nnodes:\n  - agent: a\n",
        "pipeline.yaml:6:11: agents[1].name: duplicate agent name 'a' (also agents[0])",
        id="duplicate_agent",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    model: gpt4\nnodes:\n  - agent: a\n",
        "pipeline.yaml:6:12: agents[0].model.provider: must be 'scripted', 'echo', 'function', 'openai', 'ollama' or 'bedrock', not 'gpt4'",
        id="unknown_provider",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    model: 'openai:'\nnodes:\n  - agent: a\n",
        "pipeline.yaml:6:12: agents[0].model: the openai provider needs a model name (openai:<model>)",
        id="model_without_name",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    max_cycles: -1\nnodes:\n  - agent: a\n",
        "pipeline.yaml:6:17: agents[0].max_cycles: input should be greater than 0",
        id="bad_max_cycles",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    tools: notebook\nnodes:\n  - agent: a\n",
        "pipeline.yaml:6:12: agents[0].tools: input should be a valid list",
        id="tools_not_a_list",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    tools: [calculator]\nnodes:\n  - agent: a\n",
        "pipeline.yaml:6:13: agents[0].tools[0]: unknown tool 'calculator': use package.module:name or one of notebook",
        id="unknown_tool",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    tools: ['no_such_module_xyz:tool']\nnodes:\n  - agent: a\n",
        "pipeline.yaml:6:13: agents[0].tools[0]: cannot import module 'no_such_module_xyz' (from 'no_such_module_xyz:tool'): No module named 'no_such_module_xyz'; a pipeline's own module goes beside its spec file (that folder is searched first)",
        id="tool_import_fails",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    tools: ['os.path:no_such_fn']\nnodes:\n  - agent: a\n",
        "pipeline.yaml:6:13: agents[0].tools[0]: module 'os.path' has no attribute 'no_such_fn'",
        id="tool_missing_attr",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n    function: 'os.path:join'\n",
        "pipeline.yaml:10:5: nodes[0]: a node needs exactly one of agent, function, graph, swarm, file, map, wait (found: agent, function)",
        id="node_two_kinds",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nnodes:\n  - id: x\n",
        "pipeline.yaml:5:5: nodes[0]: a node needs exactly one of agent, function, graph, swarm, file, map, wait (found: none)",
        id="node_no_kind",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writter\n",
        "pipeline.yaml:10:12: nodes[0].agent: unknown agent 'writter' (did you mean 'writer'?)",
        id="node_unknown_agent",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - id: writer\n    function: 'os.path:join'\n",
        "pipeline.yaml:11:9: nodes[1].id: duplicate node id 'writer' (also nodes[0])",
        id="duplicate_node",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nnodes:\n  - id: f\n    function: not-a-path\n",
        "pipeline.yaml:6:15: nodes[0].function: 'not-a-path' is not an import path: write package.module:name",
        id="function_bad_path",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nnodes:\n  - id: f\n    function: 'nope_pkg.mod:fn'\n",
        "pipeline.yaml:6:15: nodes[0].function: cannot import module 'nope_pkg.mod' (from 'nope_pkg.mod:fn'): No module named 'nope_pkg'; a pipeline's own module goes beside its spec file (that folder is searched first)",
        id="function_import_fails",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: writer\n    to: reviewr\n",
        "pipeline.yaml:14:9: edges[0].to: unknown node 'reviewr' (did you mean 'reviewer'?)",
        id="edge_unknown_to",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: ghost\n    to: writer\n",
        "pipeline.yaml:13:11: edges[0].from: unknown node 'ghost'",
        id="edge_unknown_from",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\nedges:\n  - from: writer\n",
        "pipeline.yaml:12:5: edges[0].to: is required",
        id="edge_missing_to",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: writer\n    to: reviewer\n    when: {output_contains: ok, output_matches: ok}\n",
        "pipeline.yaml:15:11: edges[0].when: a condition needs exactly one of output_contains, output_matches, state_equals, status, all, any, not, call, field (found: output_contains, output_matches)",
        id="condition_two_keys",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: writer\n    to: reviewer\n    when: {output_matches: '(unclosed'}\n",
        "pipeline.yaml:15:28: edges[0].when.output_matches: not a valid regular expression: missing ), unterminated subpattern at position 0",
        id="condition_bad_regex",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: writer\n    to: reviewer\n    when: {status: {writer: done}}\n",
        "pipeline.yaml:15:29: edges[0].when.status.writer: must be 'pending', 'executing', 'completed', 'failed' or 'interrupted', not 'done'",
        id="condition_bad_status",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: writer\n    to: reviewer\n    when: {output_contain: ok}\n",
        "pipeline.yaml:15:11: edges[0].when: a condition needs exactly one of output_contains, output_matches, state_equals, status, all, any, not, call, field (found: none)",
        id="condition_unknown_key",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: writer\n    to: reviewer\n    when: 'nope_cond.mod:fn'\n",
        "pipeline.yaml:15:11: edges[0].when.call: cannot import module 'nope_cond.mod' (from 'nope_cond.mod:fn'): No module named 'nope_cond'; a pipeline's own module goes beside its spec file (that folder is searched first)",
        id="condition_call_fails",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: writer\n    to: reviewer\n  - from: reviewer\n    to: writer\nentry_points: [writer]\n",
        "pipeline.yaml:15:5: edges[1]: the graph has a cycle with no bound: writer -> reviewer -> writer; set limits.max_node_executions or limits.execution_timeout",
        id="unbounded_cycle",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nedges:\n  - from: writer\n    to: reviewer\n  - from: reviewer\n    to: writer\nlimits: {max_node_executions: 5}\n",
        "pipeline.yaml:1:1: entry_points: the graph has no entry point: every node has an incoming edge; list entry_points",
        id="no_entry_point",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\n  - agent: reviewer\nentry_points: [writer]\n",
        "pipeline.yaml:11:5: nodes[1]: node 'reviewer' is unreachable from every entry point (writer)",
        id="unreachable",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\nentry_points: [writr]\n",
        "pipeline.yaml:11:16: entry_points[0]: unknown node 'writr' (did you mean 'writer'?)",
        id="unknown_entry",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\nlimits:\n  max_node_executions: 0\n",
        "pipeline.yaml:12:24: limits.max_node_executions: input should be greater than 0",
        id="negative_limit",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\nlimits:\n  node_timeout: soon\n",
        "pipeline.yaml:12:17: limits.node_timeout: input should be a valid number, unable to parse string as a number",
        id="limit_wrong_type",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\nlimits:\n  max_nodes: 3\n",
        "pipeline.yaml:12:14: limits.max_nodes: unknown key 'max_nodes' (did you mean 'max_handoffs'?)",
        id="unknown_limit",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\nsession:\n  storage: ftp://host/x\n",
        "pipeline.yaml:12:12: session.storage: unknown storage URI 'ftp://host/x': use file:./dir, s3://bucket/prefix, sqlite:./file.db, postgresql://host/db or memory",
        id="bad_storage",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: writer\n    model: scripted\n  - name: reviewer\n    model: scripted\nnodes:\n  - agent: writer\nsession:\n  save_on: always\n",
        "pipeline.yaml:12:12: session.save_on: must be 'node' or 'invocation', not 'always'",
        id="bad_save_on",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nagents:\n  - name: a\n    model:\n      provider: openai\n      model: gpt-4o\n      api_key: ${ORCHESTRA_TEST_MISSING_KEY}\nnodes:\n  - agent: a\n",
        "pipeline.yaml:9:16: agents[0].model.api_key: environment variable ORCHESTRA_TEST_MISSING_KEY is not set",
        id="missing_env",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\n",
        "pipeline.yaml:1:1: nodes: a graph needs at least one node",
        id="graph_without_nodes",
    ),
    pytest.param(
        "version: 1\nkind: swarm\nid: s\nagents:\n  - name: a\nedges:\n  - {from: a, to: a}\n",
        "pipeline.yaml:7:3: edges: a swarm has no edges (agents hand off with a tool); use entry_point",
        id="swarm_with_edges",
    ),
    pytest.param(
        "version: 1\nkind: swarm\nid: s\nagents:\n  - name: a\nentry_point: b\n",
        "pipeline.yaml:6:14: entry_point: unknown agent 'b'",
        id="swarm_bad_entry",
    ),
    pytest.param(
        "version: 1\nkind: agent\nid: x\nagents:\n  - name: a\n  - name: b\n",
        "pipeline.yaml:5:3: agents: kind agent needs exactly one agent, or `agent:` naming one (found 2)",
        id="agent_kind_two_agents",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nnodes:\n  - id: inner\n    graph:\n      kind: swarm\n      id: inner\n      agents: [{name: a}]\n",
        "pipeline.yaml:7:13: nodes[0].graph.kind: a nested graph must have kind graph, not swarm",
        id="nested_wrong_kind",
    ),
    pytest.param(
        "version: 1\nkind: graph\nid: g\nnodes:\n  - id: inner\n    graph:\n      kind: graph\n      id: inner\n      nodes:\n        - agent: missing\n",
        "pipeline.yaml:10:18: nodes[0].graph.nodes[0].agent: unknown agent 'missing'",
        id="nested_bad_inside",
    ),
    pytest.param(
        "version: 1\nkind: agent\nid: x\nagents:\n  - name: a\n    model: {provider: scripted, replies: [{tool: t, colour: red}]}\n",
        "pipeline.yaml:6:43: agents[0].model.replies[0]: a scripted tool call is {tool: name, input: {...}}, not {'tool': 't', 'colour': 'red'}",
        id="bad_scripted_reply",
    ),
]


@pytest.mark.parametrize(("document", "message"), CASES)
def test_bad_document_reports_file_line_column_field_and_message(document, message, monkeypatch):
    monkeypatch.delenv("ORCHESTRA_TEST_MISSING_KEY", raising=False)
    with pytest.raises(OrchestraSpecError) as info:
        parse_text(document, "pipeline.yaml")
    assert info.value.errors[0] == message
    assert isinstance(info.value, ValueError)


def test_there_are_at_least_30_cases():
    assert len(CASES) >= 30


def test_every_problem_is_reported_not_just_the_first():
    document = "version: 1\nkind: graph\nid: g\nnodez: []\nlimits: {max_nodes: 1}\nagents: [{name: 'a b'}]\n"
    with pytest.raises(OrchestraSpecError) as info:
        parse_text(document, "p.yaml")
    assert len(info.value.errors) == 3
    assert all(e.startswith("p.yaml:") for e in info.value.errors)
