"""YAML's ``memory:``: a graph's agents remember through the section's tools, its function nodes reach
the store, the context hook is added; problems name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestra.errors import OrchestraSpecError
from orchestra.memory import MemoryStore
from orchestra.memory.context import HEADER
from orchestra.spec import load, parse_text
from orchestra.storage import SQLiteStorage

GRAPH = """version: 1
kind: graph
id: intake
memory:
  storage: sqlite:{db}
  namespace: [support, customers]
  context: {{limit: 3, max_tokens: 100}}
agents:
  - name: clerk
    tools: [memory]
    model:
      provider: scripted
      replies:
        - {{tool: remember, input: {{text: "Ana's plan is gold", key: ana-plan}}}}
        - Stored.
nodes:
  - {{id: clerk, agent: clerk}}
  - {{id: audit, function: 'tests.spec.test_memory_spec:audit'}}
edges:
  - {{from: clerk, to: audit}}
"""

SEEN: list[list[str]] = []


def audit(node_input):
    SEEN.append([item.value["text"] for item in node_input.memory.search(("support",))])
    return "audited"


def test_a_graph_with_a_memory_section_stores_and_shares_it(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    spec = tmp_path / "intake.yaml"
    spec.write_text(GRAPH.format(db=db))
    graph = load(spec)
    SEEN.clear()
    result = graph("a new customer")
    assert result.status.value == "completed"
    # The context hook gave the clerk's second model call what the first one stored.
    first, second = graph.nodes["clerk"].executor.model.requests
    assert HEADER not in (first.system_prompt or "")
    assert "- ana-plan: Ana's plan is gold" in second.system_prompt
    assert SEEN == [["Ana's plan is gold"]]
    store = MemoryStore(SQLiteStorage(db))
    assert store.get(("support", "customers"), "ana-plan").value == {"text": "Ana's plan is gold"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            "version: 1\nkind: agent\nid: a\nagents:\n  - name: a\n    tools: [memory]\n",
            "p.yaml:6:13: agents[0].tools[0]: the memory tools need a memory: section",
        ),
        (
            "version: 1\nkind: agent\nid: a\nmemory:\n  namespace: ['..']\nagents:\n  - name: a\n",
            "p.yaml:5:14: memory.namespace: namespace ('..',): invalid namespace[0] '..'",
        ),
        (
            "version: 1\nkind: agent\nid: a\nmemory:\n  namespace: [n]\n  storage: 'ftp://x'\nagents:\n  - name: a\n",
            "p.yaml:6:12: memory.storage:",
        ),
        (
            "version: 1\nkind: agent\nid: a\nmemory:\n  namespace: [n]\n  embedder: 'tests.spec.test_memory_spec:SEEN'\n"
            "agents:\n  - name: a\n",
            "p.yaml:6:13: memory.embedder: 'tests.spec.test_memory_spec:SEEN' is not an Embedder",
        ),
        (
            "version: 1\nkind: agent\nid: a\nmemory:\n  namespace: [n]\n  contxt: {}\nagents:\n  - name: a\n",
            "p.yaml:6:11: memory.contxt: unknown key 'contxt' (did you mean 'context'?)",
        ),
    ],
)
def test_memory_problems_name_file_line_and_field(document: str, message: str) -> None:
    with pytest.raises(OrchestraSpecError) as info:
        parse_text(document, "p.yaml")
    assert info.value.errors[0].startswith(message), info.value.errors
