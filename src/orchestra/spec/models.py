"""The YAML pipeline spec, version 1, as pydantic models (the JSON Schema of ``orchestra schema``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

__all__ = [
    "AgentSpec",
    "BudgetSpec",
    "ConditionSpec",
    "ConversationManagerSpec",
    "EdgeSpec",
    "LimitsSpec",
    "MapJoinSpec",
    "MapSpec",
    "MemoryContextSpec",
    "MemorySpec",
    "ModelSpec",
    "NodeSpec",
    "PipelineSpec",
    "PriceSpec",
    "RetryPolicySpec",
    "SessionSpec",
    "WaitSpec",
]

ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"
IMPORT_PATH = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _exactly_one(values: Any, keys: tuple[str, ...], what: str) -> Any:
    if isinstance(values, dict):
        present = [k for k in keys if values.get(k) is not None]
        if len(present) != 1:
            listed = ", ".join(keys)
            found = ", ".join(present) if present else "none"
            raise ValueError(f"{what} needs exactly one of {listed} (found: {found})")
    return values


class ModelSpec(_Spec):
    """A model with options. ``provider`` is one of scripted, echo, function, openai, ollama, bedrock."""

    provider: Literal["scripted", "echo", "function", "openai", "ollama", "bedrock"]
    model: str | None = Field(default=None, description="The provider's model name or id.")
    replies: list[Any] | None = Field(
        default=None, description="scripted: one reply per model turn (text, or {tool: name, input: {...}})."
    )
    follow_history: bool | None = Field(
        default=None,
        description="scripted: pick replies by the conversation so far, so resumed runs continue.",
    )
    function: str | None = Field(default=None, pattern=IMPORT_PATH, description="function: package.module:fn")
    latency: float | None = Field(default=None, ge=0, description="scripted/function: seconds per reply.")
    base_url: str | None = None
    api_key: str | None = Field(default=None, description="Use ${ENV_VAR} rather than the secret itself.")
    region_name: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0)
    options: dict[str, Any] = Field(default_factory=dict, description="More provider options.")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        """``openai:gpt-4o`` -> ``{provider: openai, model: gpt-4o}``; ``function:pkg.mod:fn`` likewise."""
        if not isinstance(value, str):
            return value
        provider, _, rest = value.strip().partition(":")
        if provider == "function":
            return {"provider": provider, "function": rest}
        return {"provider": provider, "model": rest} if rest else {"provider": provider}

    def to_options(self) -> dict[str, Any]:
        """The mapping ``orchestra.models.resolve_model`` takes."""
        data = self.model_dump(exclude_none=True, exclude={"options"})
        data.update(self.options)
        return data


class ConversationManagerSpec(_Spec):
    """How an agent keeps its history within the model's context window."""

    type: Literal["sliding_window", "summarizing", "none"] = "sliding_window"
    window_size: int = Field(default=40, gt=0)
    should_truncate_results: bool = True
    summary_ratio: float = Field(default=0.3, ge=0.1, le=0.8)
    preserve_recent_messages: int = Field(default=10, ge=0)


class McpServerSpec(_Spec):
    """An MCP server whose tools the agent gets: ``command`` (+ ``args``, ``env``) for stdio, or ``url``."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] | None = None
    prefix: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9_-]{1,32}$")
    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)
    timeout: float = Field(default=30.0, gt=0, description="Seconds a tool call may take.")

    @model_validator(mode="before")
    @classmethod
    def _one_transport(cls, values: Any) -> Any:
        return _exactly_one(values, ("command", "url"), "an mcp server")


class McpToolsSpec(_Spec):
    """``{mcp: {...}}`` in an agent's ``tools``: every tool of an MCP server."""

    mcp: McpServerSpec


ToolItem = Annotated[
    Annotated[str, Tag("import")] | Annotated[McpToolsSpec, Tag("server")],
    Discriminator(lambda value: "server" if isinstance(value, dict | McpToolsSpec) else "import"),
]


class RetryPolicySpec(_Spec):
    """How a failed node (or map item, or swarm turn) is tried again. Without one, a node retries model
    throttling and passing provider faults (3 attempts); configuration errors are never retried."""

    max_attempts: int = Field(default=3, ge=1, description="Attempts in all, the first included.")
    initial_interval: float = Field(default=1.0, ge=0, description="Seconds before the second attempt.")
    backoff: float = Field(default=2.0, ge=1, description="Each wait is this many times the one before.")
    max_interval: float | None = Field(default=30.0, gt=0, description="The longest wait, in seconds.")
    jitter: float = Field(default=0.2, ge=0, le=1, description="The random fraction of each wait.")
    retry_on: list[str] = Field(
        default_factory=lambda: ["model_throttled", "model_unavailable"],
        description="What is retried: model_throttled, model_unavailable, model_error, timeout, any, or "
        "package.module:ExceptionClass.",
    )


class PriceSpec(_Spec):
    """A model's price, in US dollars per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class BudgetSpec(_Spec):
    """What a run (or one agent of it) may spend; a run that reaches a limit stops before its next model
    call, saved as interrupted, and resumes with a larger budget."""

    tokens: int | None = Field(default=None, ge=0, description="Input and output tokens.")
    cost_usd: float | None = Field(default=None, ge=0, description="US dollars, from prices.")
    model_calls: int | None = Field(default=None, ge=0)
    wall_seconds: float | None = Field(default=None, ge=0, description="Seconds of running, across resumes.")
    prices: dict[str, PriceSpec] = Field(
        default_factory=dict,
        description="{model name or pattern (openai:gpt-4o*): {input: .., output: ..}}; none are shipped.",
    )


class AgentSpec(_Spec):
    """An agent definition; nodes refer to it by name (each node gets its own agent built from it)."""

    name: str = Field(pattern=ID_PATTERN)
    description: str | None = None
    system_prompt: str | None = None
    model: ModelSpec | None = Field(
        default=None,
        description="A model string (openai:gpt-4o, bedrock:<id>, ollama:<m>, scripted) or options.",
    )
    tools: list[ToolItem] = Field(
        default_factory=list,
        description="package.module:tool import paths, 'notebook', or {mcp: {command: ..., args: [...]}} / "
        "{mcp: {url: ...}} for an MCP server's tools.",
    )
    state: dict[str, Any] = Field(default_factory=dict, description="Initial agent state (JSON).")
    conversation_manager: ConversationManagerSpec | None = None
    max_cycles: int = Field(default=50, gt=0)
    output_type: str | None = Field(
        default=None,
        pattern=IMPORT_PATH,
        description="Structured output: package.module:Class, a pydantic model (see output_schema).",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="Structured output: an inline JSON Schema object (or use output_type)."
    )
    max_output_retries: int = Field(default=3, ge=0)
    retry: RetryPolicySpec | None = Field(
        default=None, description="The retry policy of its nodes or turns (kind agent: of its model calls)."
    )
    budget: BudgetSpec | None = Field(
        default=None, description="What each of its nodes may spend in a run (kind agent: in one invocation)."
    )

    @model_validator(mode="after")
    def _one_output(self) -> AgentSpec:
        if self.output_type is not None and self.output_schema is not None:
            raise ValueError("give output_type or output_schema, not both")
        return self


class FieldTest(_Spec):
    """``when: {field: total, gt: 100}``: a field of a node's structured output, compared.

    ``field`` is a dotted path (``customer.name``) into the output of ``of`` (default: the edge's source);
    exactly one comparison. A missing field, or a value that cannot be compared, is false.
    """

    field: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    of: str | None = Field(default=None, pattern=ID_PATTERN)
    eq: Any = None
    ne: Any = None
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    in_: list[Any] | None = Field(default=None, alias="in")

    @model_validator(mode="before")
    @classmethod
    def _one_comparison(cls, values: Any) -> Any:
        return _exactly_one(values, ("eq", "ne", "gt", "ge", "lt", "le", "in"), "a field condition")


_FIELD_TEST_KEYS = ("field", "of", "eq", "ne", "gt", "ge", "lt", "le", "in")


class ConditionSpec(_Spec):
    """A built-in edge condition: exactly one key. No code runs but the import paths the file names.

    - ``output_contains``: the edge's source node's output contains this text;
    - ``output_matches``: this regular expression matches somewhere in the source's output;
    - ``state_equals``: every key has this value in the orchestrator's shared state;
    - ``status``: ``{node: status}``: those nodes' latest statuses (completed, failed, ...);
    - ``all`` / ``any`` / ``not``: combine conditions;
    - ``field`` with one of ``eq``/``ne``/``gt``/``ge``/``lt``/``le``/``in``: a field of the source node's
      structured output (see ``FieldTest``);
    - ``call``: an import path to ``fn(state) -> bool`` (a plain string ``when: pkg.mod:fn`` means the same).
    """

    output_contains: str | None = None
    output_matches: str | None = None
    state_equals: dict[str, Any] | None = None
    status: dict[str, Literal["pending", "executing", "completed", "failed", "interrupted"]] | None = None
    all_: list[ConditionSpec] | None = Field(default=None, alias="all", min_length=1)
    any_: list[ConditionSpec] | None = Field(default=None, alias="any", min_length=1)
    not_: ConditionSpec | None = Field(default=None, alias="not")
    call: str | None = Field(default=None, pattern=IMPORT_PATH)
    field_test: FieldTest | None = Field(default=None, alias="field")

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, values: Any) -> Any:
        if isinstance(values, str):
            return {"call": values}
        if isinstance(values, dict) and isinstance(values.get("field"), str):
            # {field: total, gt: 100}: the comparison sits beside the field; it is one condition.
            tested = {k: v for k, v in values.items() if k in _FIELD_TEST_KEYS}
            values = {**{k: v for k, v in values.items() if k not in _FIELD_TEST_KEYS}, "field": tested}
        keys = (
            "output_contains",
            "output_matches",
            "state_equals",
            "status",
            "all",
            "any",
            "not",
            "call",
            "field",
        )
        return _exactly_one(values, keys, "a condition")


class MapJoinSpec(_Spec):
    """When a map is done before all its items are: the ``first`` K items to complete, or ``until`` a
    function of the completed items (``fn(items) -> bool``, called after each) is true."""

    first: int | None = Field(default=None, ge=1)
    until: str | None = Field(default=None, pattern=IMPORT_PATH, description="package.module:fn")

    @model_validator(mode="before")
    @classmethod
    def _one_mode(cls, values: Any) -> Any:
        return _exactly_one(values, ("first", "until"), "a map join")


class MapSpec(_Spec):
    """A dynamic fan-out: one instance of ``node`` per item of a list known at run time, in parallel."""

    over: str | None = Field(
        default=None,
        description="Where the list comes from: <node> (its output), <node>.<field.path>, state.<key>; "
        "default: the predecessor's output.",
    )
    node: str | NodeSpec = Field(
        description="What runs per item: an agent's name, package.module:function, or an inline node "
        "({agent: ..}, {function: ..}, {graph: ..}, {swarm: ..}, {file: ..}, {map: ..})."
    )
    join: Literal["all"] | MapJoinSpec = "all"
    max_concurrency: int | None = Field(default=None, gt=0, description="The most items running at once.")


_DURATION = r"^\s*(\d+(\.\d+)?\s*[smhdw]\s*)+$"


class WaitSpec(_Spec):
    """A durable wait ([waiting.md](waiting.md)): exactly one of ``for`` (a duration: seconds, or ``90s``, ``15m``,
    ``2h``, ``1d``, ``1w`` and sums like ``1h30m``), ``until`` (an ISO 8601 time with its zone) or
    ``event`` (a name; ``timeout`` is then a duration too)."""

    for_: float | str | None = Field(default=None, alias="for", description="How long: seconds, or 1h30m.")
    until: str | None = Field(
        default=None, description="An ISO 8601 time with its zone, e.g. 2026-12-01T09:00Z."
    )
    event: str | None = Field(default=None, pattern=ID_PATTERN, description="Wait for this event instead.")
    timeout: float | str | None = Field(default=None, description="event: how long at most (seconds, or 2d).")

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, values: Any) -> Any:
        return _exactly_one(values, ("for", "until", "event"), "a wait")


class NodeSpec(_Spec):
    """A graph node: exactly one of ``agent``, ``function``, ``graph``, ``swarm``, ``file``, ``map`` or
    ``wait``."""

    id: str | None = Field(default=None, pattern=ID_PATTERN, description="Defaults to the agent's name.")
    agent: str | None = Field(default=None, description="The name of an agent in `agents:`.")
    function: str | None = Field(default=None, pattern=IMPORT_PATH, description="package.module:function")
    graph: PipelineSpec | None = Field(default=None, description="A nested graph, inline.")
    swarm: PipelineSpec | None = Field(default=None, description="A nested swarm, inline.")
    file: str | None = Field(
        default=None, description="A nested graph or swarm in another file (relative path)."
    )
    map: MapSpec | None = Field(default=None, description="A fan-out over a list known at run time.")
    wait: WaitSpec | None = Field(default=None, description="A durable wait: a duration, a time or an event.")
    join: Literal["all", "any"] = "all"
    retry: RetryPolicySpec | None = Field(default=None, description="This node's retry policy.")

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, values: Any) -> Any:
        return _exactly_one(values, ("agent", "function", "graph", "swarm", "file", "map", "wait"), "a node")


class EdgeSpec(_Spec):
    """An edge; ``when`` decides if it fires (a built-in condition or an import path)."""

    from_: str = Field(alias="from")
    to: str
    when: ConditionSpec | None = None


class LimitsSpec(_Spec):
    """Run limits (graph: the first five; swarm: timeouts, handoffs, iterations, repetition)."""

    max_node_executions: int | None = Field(default=None, gt=0)
    execution_timeout: float | None = Field(default=None, gt=0)
    node_timeout: float | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, gt=0)
    reset_on_revisit: bool = False
    max_handoffs: int | None = Field(default=None, gt=0)
    max_iterations: int | None = Field(default=None, gt=0)
    repetitive_handoff_detection_window: int | None = Field(default=None, ge=0)
    repetitive_handoff_min_unique_agents: int | None = Field(default=None, ge=0)


class SessionSpec(_Spec):
    """Where runs are saved: ``file:./dir``, ``s3://bucket/prefix``, ``sqlite:./runs.db``,
    ``postgresql://host/db`` or ``memory``."""

    storage: str = "file:./.orchestra"
    save_on: Literal["node", "invocation"] = "node"


class MemoryContextSpec(_Spec):
    """Put the most relevant memories into every agent's model calls (``MemoryContext``)."""

    limit: int = Field(default=5, ge=1, le=100, description="How many items to search for.")
    max_tokens: int = Field(
        default=400, ge=1, description="The bound on what is added (tokens estimated as characters / 4)."
    )


class MemorySpec(_Spec):
    """A memory store the pipeline's nodes share: agents with the ``memory`` tools remember, recall and
    forget in ``namespace``; served, under the caller's namespace in the workspace's store."""

    storage: str | None = Field(
        default=None,
        description="Where items live (a storage URI); default: session.storage, else ./.orchestra.",
    )
    namespace: list[Annotated[str, Field(pattern=ID_PATTERN)]] = Field(
        min_length=1, description="The namespace the memory tools and context use, e.g. [support, customers]."
    )
    embedder: str | None = Field(
        default=None,
        pattern=IMPORT_PATH,
        description="package.module:name of an Embedder, or of a function that returns one (search by meaning).",
    )
    embed_fields: list[str] = Field(default_factory=lambda: ["text"], min_length=1)
    context: MemoryContextSpec | None = None


class RetrySpec(_Spec):
    """How Temporal retries a node after an infrastructure failure (a lost worker, a missed heartbeat, a
    storage or network error); a node's own error or timeout is never retried."""

    maximum_attempts: int = Field(default=5, ge=1)
    initial_interval: float = Field(default=0.2, gt=0, description="Seconds before the first retry.")
    backoff_coefficient: float = Field(default=2.0, ge=1)
    maximum_interval: float | None = Field(
        default=None, gt=0, description="Seconds between retries, at most."
    )


class ContinueAsNewSpec(_Spec):
    """When a run's workflow continues as new (a fresh history, the run read back from the session):
    once its history holds this many events or bytes. Temporal's own limits are 51,200 events and 50 MB."""

    max_events: int = Field(default=10_000, ge=50, le=40_000)
    max_bytes: int = Field(default=10_000_000, ge=10_000, le=40_000_000)


class TemporalSpec(_Spec):
    """Settings for runs on Temporal workers (ignored by local runs)."""

    retry: RetrySpec = Field(default_factory=RetrySpec)
    continue_as_new: ContinueAsNewSpec = Field(default_factory=ContinueAsNewSpec)
    heartbeat_seconds: float | None = Field(
        default=None, gt=0, description="How soon a lost worker is noticed (default 10 s)."
    )


class PipelineSpec(_Spec):
    """A pipeline: a graph, a swarm or a single agent."""

    version: Literal[1] = 1
    kind: Literal["graph", "swarm", "agent"]
    id: str = Field(pattern=ID_PATTERN)
    description: str | None = None
    input: str | None = Field(default=None, description="The default task when none is given.")
    agents: list[AgentSpec] = Field(default_factory=list)
    nodes: list[NodeSpec] = Field(default_factory=list, description="graph: the nodes; swarm: the agents.")
    edges: list[EdgeSpec] = Field(default_factory=list)
    entry_points: list[str] = Field(default_factory=list, description="graph: where runs start.")
    entry_point: str | None = Field(default=None, description="swarm: the agent that gets the task first.")
    agent: str | None = Field(default=None, description="kind agent: which agent (default: the only one).")
    state: dict[str, Any] = Field(
        default_factory=dict, description="The orchestrator's initial shared state."
    )
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    session: SessionSpec | None = None
    memory: MemorySpec | None = None
    temporal: TemporalSpec = Field(default_factory=TemporalSpec)
    retry: RetryPolicySpec | None = Field(
        default=None,
        description="The retry policy of every node without one of its own (kind agent: of its model calls).",
    )
    budget: BudgetSpec | None = Field(
        default=None, description="What one run may spend (kind agent: one invocation)."
    )
    pipeline_version: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="This version of the pipeline, recorded in every run it starts (see migrations).",
    )
    migrations: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$",
        description="A module whose MIGRATIONS maps a saved pipeline_version to fn(run), or "
        "package.module:name of such a mapping.",
    )
    resume_from: Literal["entry_point", "last_active"] = Field(
        default="entry_point",
        description="swarm: where the next invocation starts (last_active: the agent that answered last).",
    )
    history: Literal["run", "shared", "private"] = Field(
        default="run",
        description="swarm: what agents remember across invocations: nothing, the conversation, or each "
        "its own history.",
    )
