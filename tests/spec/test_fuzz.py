"""Feed the loader arbitrary documents: each ends in a built pipeline or an OrchestraSpecError, never
another exception. More examples with ORCHESTRA_STRESS=1."""

import os

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra.errors import OrchestraSpecError
from orchestra.spec import parse_text
from orchestra.spec.loader import _build_checked

EXAMPLES = 1000 if os.environ.get("ORCHESTRA_STRESS") else 150
KEYS = [
    "version",
    "kind",
    "id",
    "input",
    "agents",
    "nodes",
    "edges",
    "entry_points",
    "entry_point",
    "agent",
    "state",
    "limits",
    "session",
    "name",
    "model",
    "tools",
    "system_prompt",
    "conversation_manager",
    "type",
    "window_size",
    "provider",
    "replies",
    "tool",
    "follow_history",
    "function",
    "graph",
    "swarm",
    "join",
    "from",
    "to",
    "when",
    "output_contains",
    "output_matches",
    "state_equals",
    "status",
    "all",
    "any",
    "not",
    "call",
    "max_node_executions",
    "execution_timeout",
    "node_timeout",
    "max_concurrency",
    "max_handoffs",
    "storage",
    "save_on",
    "unknown",
]
WORDS = [
    "graph",
    "swarm",
    "agent",
    "a",
    "b",
    "writer",
    "scripted",
    "echo",
    "notebook",
    "completed",
    "node",
    "invocation",
    "memory",
    "tests.support:spec_source",
    "tests.support:spec_mark",
    "openai:",
    "(",
    "v[0-9]",
    "",
    "${HOME}",
    "file:./x",
    "1",
    "none",
    "sliding_window",
    "summarizing",
    "any",
    "all",
]

scalars = st.one_of(
    st.sampled_from(WORDS),
    st.integers(-3, 1000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(KEYS), children, max_size=5),
    ),
    max_leaves=25,
)
documents = st.fixed_dictionaries(
    {
        "version": st.sampled_from([1, 1, 1, 2, "1"]),
        "kind": st.sampled_from(["graph", "swarm", "agent", "x"]),
        "id": st.sampled_from(["p", "bad id", ""]),
    },
    optional={key: values for key in KEYS if key not in ("version", "kind", "id")},
)


def outcome(text: str) -> None:
    """Parse and build; an OrchestraSpecError is a fine outcome, any other exception fails the test."""
    errors: list[str] = []
    try:
        _build_checked(parse_text(text, "fuzz.yaml"))
    except OrchestraSpecError as exc:
        errors = exc.errors or ["<empty>"]
    assert all(".yaml:" in line for line in errors), errors


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_structured_documents(document):
    outcome(yaml.safe_dump(document, allow_unicode=True))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    outcome(text)


@settings(max_examples=EXAMPLES // 3, deadline=None)
@given(st.integers(1, 3000))
def test_deep_nesting(depth):
    outcome("a: " + "[" * depth + "]" * depth)
