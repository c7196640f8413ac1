"""Load pipelines from YAML: parse safely, report every problem as ``file:line:column: field: message``,
then build the Graph, Swarm or Agent.

Trust model: the YAML is parsed with PyYAML's safe loader, so no tag can construct a Python object and
nothing in the file runs. The only code that runs is what the file names by import path
(``package.module:name``) for tools, function nodes, ``call`` conditions and function models; the
spec file's folder is put first on ``sys.path`` so pipelines can keep their functions beside them.
Load specs you would trust as code.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestra._imports import import_object
from orchestra.agent import Agent
from orchestra.agent.structured import model_from_schema, resolve_output_type
from orchestra.conversation import (
    NullConversationManager,
    SlidingWindowConversationManager,
    SummarizingConversationManager,
)
from orchestra.errors import ConfigurationError, OrchestraSpecError
from orchestra.models import Model, default_model, resolve_model, scripted_reply
from orchestra.multiagent import Budget, Graph, Map, MultiAgentBase, RetryPolicy, Swarm
from orchestra.multiagent.validation import back_edges
from orchestra.retry import error_types
from orchestra.spec._memory import (
    MEMORY_TOOL,
    building_with,
    check_memory,
    memory_hooks,
    memory_store,
    memory_tools_of,
)
from orchestra.spec._yaml import Located, load_located
from orchestra.spec.conditions import SpecCondition
from orchestra.spec.models import (
    ID_PATTERN,
    IMPORT_PATH,
    AgentSpec,
    BudgetSpec,
    ConditionSpec,
    MapSpec,
    McpToolsSpec,
    ModelSpec,
    NodeSpec,
    PipelineSpec,
    RetryPolicySpec,
    WaitSpec,
)
from orchestra.storage import check_storage_uri, storage_from_uri
from orchestra.waits import WaitNode, parse_duration, parse_time

__all__ = ["LoadedSpec", "build", "load", "parse_file", "parse_text"]

VENDED_TOOLS = {"notebook": "orchestra.tools.notebook:notebook"}
Path_ = tuple[str | int, ...]


@dataclass
class LoadedSpec:
    """A parsed, checked spec with what building it needs (its file and the files it includes)."""

    spec: PipelineSpec
    path: Path
    located: Located
    included: dict[Path_, LoadedSpec] = field(default_factory=dict)


def _suggest(name: str, candidates: typing.Iterable[str]) -> str:
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _model_at(
    loc: typing.Sequence[str | int], root: type[BaseModel] = PipelineSpec
) -> type[BaseModel] | None:
    """The model class found by following ``loc`` from ``root`` (for key suggestions)."""
    current: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        found = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)),
            None,
        )
        if found is None:
            return None
        current = _unwrap(found.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0] if len(args) == 1 else annotation
            if len(args) != 1:
                return annotation
        elif origin in (list, dict):
            annotation = typing.get_args(annotation)[-1]
        else:
            return annotation


def _describe(error: Any, root: type[BaseModel] = PipelineSpec) -> str:
    kind = error["type"]
    loc = error["loc"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1], root)
        known = [f.alias or name for name, f in model.model_fields.items() if not f.exclude] if model else []
        return f"unknown key {loc[-1]!r}{_suggest(str(loc[-1]), known)}"
    if kind == "missing":
        return "is required"
    if kind == "literal_error":
        return f"must be {error['ctx']['expected']}, not {error['input']!r}"
    if kind == "string_pattern_mismatch":
        pattern = error["ctx"]["pattern"]
        if pattern == ID_PATTERN:
            return f"{error['input']!r} is not a valid id: use 1-128 letters, digits, '.', '_' or '-'"
        if pattern == IMPORT_PATH:
            return f"{error['input']!r} is not an import path: write package.module:name"
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    return message[:1].lower() + message[1:]


def _validate(located: Located) -> PipelineSpec | None:
    if located.data is None:
        return None
    if not isinstance(located.data, dict):
        located.problems.append(located.error((), "a pipeline is a mapping with version, kind, id, ..."))
        return None
    try:
        return PipelineSpec.model_validate(located.data)
    except ValidationError as exc:
        located.problems.extend(_validation_problems(located, exc, PipelineSpec))
        return None


def _validation_problems(located: Located, exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """Each error of validating ``located``'s data as ``root``, as ``file:line:column: field: message``
    (one per field; an unknown key with the nearest known one)."""
    problems: list[str] = []
    seen: set[tuple[Any, ...]] = set()
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if loc in seen:
            continue
        seen.add(loc)
        problems.append(located.error(loc, _describe(error, root)))
    return problems


def parse_text(text: str, filename: str, *, base_dir: Path | None = None) -> LoadedSpec:
    """Parse and check a spec given as text (``filename`` is how errors name it).

    Raises:
        OrchestraSpecError: with every problem found.
    """
    return _parse(text, filename, base_dir or Path.cwd(), [])


def parse_file(path: str | os.PathLike[str]) -> LoadedSpec:
    """Parse and check a spec file (and every file it includes).

    Raises:
        OrchestraSpecError: with every problem found, each as ``file:line:column: field: message``.
    """
    return _parse_path(Path(path), [])


def _parse_path(path: Path, stack: list[Path]) -> LoadedSpec:
    resolved = path.resolve()
    if resolved in stack:
        chain = " -> ".join(str(p.name) for p in [*stack, resolved])
        raise OrchestraSpecError(f"{path}:1:1: (document): the spec includes itself ({chain})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OrchestraSpecError(f"{path}:1:1: (document): cannot read the file: {exc}") from None
    # Functions named by import path may live beside the spec (see the trust model above).
    if str(resolved.parent) not in sys.path:
        sys.path.insert(0, str(resolved.parent))
    return _parse(text, str(path), resolved.parent, [*stack, resolved])


def _parse(text: str, filename: str, base_dir: Path, stack: list[Path]) -> LoadedSpec:
    located = load_located(text, filename)
    spec = _validate(located)
    if spec is None:
        raise OrchestraSpecError(located.problems or [located.error((), "empty spec")])
    loaded = LoadedSpec(spec=spec, path=base_dir / Path(filename).name, located=located)
    _check(loaded, spec, (), base_dir, stack, {})
    if located.problems:
        raise OrchestraSpecError(located.problems)
    return loaded


def _check(
    loaded: LoadedSpec,
    spec: PipelineSpec,
    prefix: Path_,
    base_dir: Path,
    stack: list[Path],
    outer_agents: dict[str, AgentSpec],
) -> None:
    """Semantic checks: names, references, kinds, cycles, imports; recurses into nested specs."""
    located = loaded.located

    def problem(path: Path_, message: str) -> None:
        located.problems.append(located.error((*prefix, *path), message))

    agents: dict[str, AgentSpec] = dict(outer_agents)
    local: dict[str, int] = {}
    for index, agent in enumerate(spec.agents):
        if agent.name in local:
            problem(
                ("agents", index, "name"),
                f"duplicate agent name {agent.name!r} (also agents[{local[agent.name]}])",
            )
        local[agent.name] = index
        agents[agent.name] = agent
        _check_agent(agent, ("agents", index), problem)
    check_memory(spec, problem)
    if spec.session is not None:
        try:
            check_storage_uri(spec.session.storage)
        except ConfigurationError as exc:
            problem(("session", "storage"), str(exc))
    if spec.retry is not None:
        _check_retry(spec.retry, ("retry",), problem)
    if spec.migrations is not None:
        _check_migrations(spec.migrations, problem)
    if spec.kind != "swarm":
        for key, default in (("resume_from", "entry_point"), ("history", "run")):
            if getattr(spec, key) != default:
                problem((key,), f"{key} is for swarms (what the next invocation starts from)")

    if spec.kind == "agent":
        for key in ("nodes", "edges", "entry_points"):
            if getattr(spec, key):
                problem((key,), f"a pipeline of kind agent has no {key}")
        if spec.migrations is not None:
            problem(
                ("migrations",), "migrations are for graphs and swarms (a single agent has no run to pin)"
            )
        if spec.agent is not None:
            if spec.agent not in agents:
                problem(("agent",), f"unknown agent {spec.agent!r}{_suggest(spec.agent, agents)}")
        elif len(spec.agents) != 1:
            problem(
                ("agents",),
                f"kind agent needs exactly one agent, or `agent:` naming one (found {len(spec.agents)})",
            )
        return

    ids: dict[str, int] = {}
    for index, node in enumerate(spec.nodes):
        node_id = node.id or node.agent
        if node_id is None:
            problem(("nodes", index, "id"), "a node that is not an agent needs an id")
            continue
        if node_id in ids:
            problem(
                ("nodes", index, "id" if node.id else "agent"),
                f"duplicate node id {node_id!r} (also nodes[{ids[node_id]}])",
            )
        ids[node_id] = index
        _check_node(loaded, node, ("nodes", index), prefix, base_dir, stack, agents, problem)

    if spec.kind == "swarm":
        for key in ("edges", "entry_points"):
            if getattr(spec, key):
                problem((key,), f"a swarm has no {key} (agents hand off with a tool); use entry_point")
        members = list(ids) if spec.nodes else list(local)
        for index, node in enumerate(spec.nodes):
            if node.agent is None:
                problem(("nodes", index), "swarm nodes are agents (agent: <name>)")
        if not members:
            problem(("agents",), "a swarm needs at least one agent")
        if spec.entry_point is not None and spec.entry_point not in members:
            problem(
                ("entry_point",), f"unknown agent {spec.entry_point!r}{_suggest(spec.entry_point, members)}"
            )
        return

    if not spec.nodes:
        problem(("nodes",), "a graph needs at least one node")
        return
    if spec.entry_point is not None:
        problem(("entry_point",), "entry_point is for swarms; a graph has entry_points")
    edges_ok = True
    for index, edge in enumerate(spec.edges):
        for end, key in ((edge.from_, "from"), (edge.to, "to")):
            if end not in ids:
                edges_ok = False
                problem(("edges", index, key), f"unknown node {end!r}{_suggest(end, ids)}")
        if edge.when is not None:
            _check_condition(edge.when, ("edges", index, "when"), problem)
    for index, entry in enumerate(spec.entry_points):
        if entry not in ids:
            edges_ok = False
            problem(("entry_points", index), f"unknown node {entry!r}{_suggest(entry, ids)}")
    for index, node in enumerate(spec.nodes):
        over = node.map.over if node.map is not None else None
        if over is not None:
            head = over.split(".", 1)[0]
            if head not in ids and not (head == "state" and "." in over):
                problem(
                    ("nodes", index, "map", "over"),
                    f"{over!r} names no node{_suggest(head, ids)}: write <node>, <node>.<field> or state.<key>",
                )
    if edges_ok:
        _check_structure(spec, ids, problem)


def _check_structure(spec: PipelineSpec, ids: dict[str, int], problem: Any) -> None:
    import networkx as nx  # when a graph is first checked (see multiagent/validation.py)

    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(ids)
    graph.add_edges_from((e.from_, e.to) for e in spec.edges)
    entries = spec.entry_points or [n for n in ids if graph.in_degree(n) == 0]
    if not entries:
        problem(
            ("entry_points",),
            "the graph has no entry point: every node has an incoming edge; list entry_points",
        )
        return
    reachable = set(entries)
    for entry in entries:
        reachable |= nx.descendants(graph, entry)
    for node_id, index in ids.items():
        if node_id not in reachable:
            problem(
                ("nodes", index),
                f"node {node_id!r} is unreachable from every entry point ({', '.join(entries)})",
            )
    limits = spec.limits
    if limits.max_node_executions is None and limits.execution_timeout is None:
        closing = sorted(back_edges(graph, entries))
        if closing:
            src, dst = closing[0]
            index = next(i for i, e in enumerate(spec.edges) if (e.from_, e.to) == (src, dst))
            cycle = nx.shortest_path(graph, dst, src)
            path = " -> ".join([*cycle, dst])
            problem(
                ("edges", index),
                f"the graph has a cycle with no bound: {path}; set limits.max_node_executions "
                "or limits.execution_timeout",
            )


def _check_import(path: str, where: Path_, problem: Any, what: str) -> Any:
    try:
        obj = import_object(VENDED_TOOLS.get(path, path))
    except ConfigurationError as exc:
        problem(where, str(exc))
        return None
    except Exception as exc:  # importing user code may raise anything
        problem(where, f"importing {path!r} raised {type(exc).__name__}: {exc}")
        return None
    if not callable(obj):
        problem(where, f"{path!r} is not a {what}: it is not callable")
        return None
    return obj


def _check_agent(agent: AgentSpec, path: Path_, problem: Any) -> None:
    for index, tool_path in enumerate(agent.tools):
        if not isinstance(tool_path, str):
            continue  # an MCP server: connected when the agent is built
        if tool_path == MEMORY_TOOL:
            continue  # the memory: section's tools (spec/_memory.py checks there is one)
        if tool_path not in VENDED_TOOLS and ":" not in tool_path:
            problem(
                (*path, "tools", index),
                f"unknown tool {tool_path!r}: use package.module:name or one of {', '.join(VENDED_TOOLS)}",
            )
            continue
        _check_import(tool_path, (*path, "tools", index), problem, "tool")
    if agent.model is not None and agent.model.provider == "function":
        if agent.model.function is None:
            problem((*path, "model"), "a function model needs function: package.module:fn")
        else:
            _check_import(agent.model.function, (*path, "model", "function"), problem, "function")
    if (
        agent.model is not None
        and agent.model.provider in ("openai", "ollama", "bedrock")
        and not agent.model.model
    ):
        provider = agent.model.provider
        problem((*path, "model"), f"the {provider} provider needs a model name ({provider}:<model>)")
    if agent.output_type is not None:
        try:
            resolve_output_type(agent.output_type)
        except ConfigurationError as exc:
            problem((*path, "output_type"), str(exc))
        except Exception as exc:  # importing user code may raise anything
            problem(
                (*path, "output_type"), f"importing {agent.output_type!r} raised {type(exc).__name__}: {exc}"
            )
    if agent.output_schema is not None:
        try:
            _output_type(agent)
        except ConfigurationError as exc:
            problem((*path, "output_schema"), str(exc))
    if agent.retry is not None:
        _check_retry(agent.retry, (*path, "retry"), problem)
    if agent.model is not None and agent.model.provider == "scripted":
        for index, reply in enumerate(agent.model.replies or []):
            try:
                scripted_reply(reply)
            except ConfigurationError as exc:
                problem((*path, "model", "replies", index), str(exc))


def _check_condition(spec: ConditionSpec, path: Path_, problem: Any) -> None:
    if spec.output_matches is not None:
        try:
            re.compile(spec.output_matches)
        except re.error as exc:
            problem((*path, "output_matches"), f"not a valid regular expression: {exc}")
    if spec.call is not None:
        _check_import(spec.call, (*path, "call"), problem, "condition")
    for key, parts in (("all", spec.all_), ("any", spec.any_)):
        for index, part in enumerate(parts or []):
            _check_condition(part, (*path, key, index), problem)
    if spec.not_ is not None:
        _check_condition(spec.not_, (*path, "not"), problem)


def _check_node(
    loaded: LoadedSpec,
    node: NodeSpec,
    path: Path_,
    prefix: Path_,
    base_dir: Path,
    stack: list[Path],
    agents: dict[str, AgentSpec],
    problem: Any,
) -> None:
    if node.agent is not None and node.agent not in agents:
        problem((*path, "agent"), f"unknown agent {node.agent!r}{_suggest(node.agent, agents)}")
    if node.function is not None:
        _check_import(node.function, (*path, "function"), problem, "function")
    if node.retry is not None:
        _check_retry(node.retry, (*path, "retry"), problem)
    if node.map is not None:
        _check_map(loaded, node.map, (*path, "map"), prefix, base_dir, stack, agents, problem)
    if node.wait is not None:
        _check_wait(node.wait, (*path, "wait"), problem)
    for key in ("graph", "swarm"):
        nested: PipelineSpec | None = getattr(node, key)
        if nested is not None:
            if nested.kind != key:
                problem((*path, key, "kind"), f"a nested {key} must have kind {key}, not {nested.kind}")
            _check(loaded, nested, (*prefix, *path, key), base_dir, stack, agents)
    if node.file is not None:
        target = base_dir / node.file
        try:
            included = _parse_path(target, stack)
        except OrchestraSpecError as exc:
            problem((*path, "file"), f"the included spec {node.file!r} is not valid:")
            loaded.located.problems.extend(exc.errors)
            return
        if included.spec.kind not in ("graph", "swarm"):
            problem((*path, "file"), f"an included spec must be a graph or a swarm, not {included.spec.kind}")
        loaded.included[(*prefix, *path)] = included


def _check_map(
    loaded: LoadedSpec,
    spec: MapSpec,
    path: Path_,
    prefix: Path_,
    base_dir: Path,
    stack: list[Path],
    agents: dict[str, AgentSpec],
    problem: Any,
) -> None:
    body = spec.node
    if isinstance(body, str):
        if ":" in body:
            _check_import(body, (*path, "node"), problem, "function")
        elif body not in agents:
            problem(
                (*path, "node"),
                f"unknown agent {body!r}{_suggest(body, agents)}: name an agent, or write package.module:fn",
            )
    else:
        for key in ("id", "retry"):
            if getattr(body, key) is not None:
                problem((*path, "node", key), f"a map's node has no {key} of its own (the map node has)")
        if body.join != "all":
            problem((*path, "node", "join"), "a map's node has no join (the map's join says when it is done)")
        _check_node(loaded, body, (*path, "node"), prefix, base_dir, stack, agents, problem)
    if not isinstance(spec.join, str) and spec.join.until is not None:
        _check_import(spec.join.until, (*path, "join", "until"), problem, "function")


def _check_retry(spec: RetryPolicySpec, path: Path_, problem: Any) -> None:
    try:
        error_types(spec.retry_on)
    except ConfigurationError as exc:
        problem((*path, "retry_on"), str(exc))
    except Exception as exc:  # importing user code may raise anything
        problem((*path, "retry_on"), f"importing raised {type(exc).__name__}: {exc}")
    if spec.max_interval is not None and spec.max_interval < spec.initial_interval:
        problem((*path, "max_interval"), "is shorter than initial_interval")


def _migrations(path: str) -> Any:
    """The mapping of saved version -> migration a spec's ``migrations:`` names (a module's
    ``MIGRATIONS``, or ``package.module:name``)."""
    found = import_object(path if ":" in path else f"{path}:MIGRATIONS")
    if not isinstance(found, dict) or not all(isinstance(k, str) and callable(v) for k, v in found.items()):
        raise ConfigurationError(
            f"{path!r} is not a mapping of saved pipeline_version to migration function "
            "({'v1': fn, ...}, in the module's MIGRATIONS)"
        )
    return found


def _check_migrations(path: str, problem: Any) -> None:
    try:
        _migrations(path)
    except ConfigurationError as exc:
        problem(("migrations",), str(exc))
    except Exception as exc:  # importing user code may raise anything
        problem(("migrations",), f"importing {path!r} raised {type(exc).__name__}: {exc}")


# -- building -----------------------------------------------------------------------------------------


def _model_for(spec: ModelSpec | None, override: Model | str | None) -> Model | None:
    if override is not None:
        return resolve_model(override)
    env_model = default_model()
    if env_model is not None:
        return env_model
    return resolve_model(spec.to_options()) if spec is not None else None


def _build_agent(spec: AgentSpec, override: Model | str | None, session_manager: Any = None) -> Agent:
    manager = spec.conversation_manager
    conversation: Any = None
    if manager is not None:
        if manager.type == "none":
            conversation = NullConversationManager()
        elif manager.type == "summarizing":
            conversation = SummarizingConversationManager(
                manager.summary_ratio, manager.preserve_recent_messages
            )
        else:
            conversation = SlidingWindowConversationManager(
                manager.window_size, manager.should_truncate_results
            )
    return Agent(
        model=_model_for(spec.model, override),
        name=spec.name,
        description=spec.description,
        system_prompt=spec.system_prompt,
        tools=[_tool(t) for t in spec.tools],
        hooks=memory_hooks(),
        state=spec.state,
        conversation_manager=conversation,
        max_cycles=spec.max_cycles,
        session_manager=session_manager,
        output_type=_output_type(spec),
        max_output_retries=spec.max_output_retries,
    )


def _tool(item: str | McpToolsSpec) -> Any:
    if item == MEMORY_TOOL:
        return memory_tools_of()
    if isinstance(item, str):
        return import_object(VENDED_TOOLS.get(item, item))
    from orchestra.tools.mcp import MCPClient

    server = item.mcp
    options = {
        "prefix": server.prefix,
        "include": server.include,
        "exclude": server.exclude,
        "timeout": server.timeout,
    }
    if server.command is not None:
        return MCPClient.stdio(server.command, server.args, server.env, **options)
    assert server.url is not None
    return MCPClient.http(server.url, server.headers, **options)


def _output_type(spec: AgentSpec) -> Any:
    """The agent's structured output type: imported, or a model made from its inline JSON Schema."""
    if spec.output_schema is not None:
        title = (
            spec.output_schema.get("title") or f"{spec.name.title().replace('-', '').replace('_', '')}Output"
        )
        return model_from_schema(spec.output_schema, str(title))
    return spec.output_type


def _check_wait(spec: WaitSpec, path: Path_, problem: Any) -> None:
    for key, value in (("for", spec.for_), ("timeout", spec.timeout)):
        if value is not None:
            try:
                parse_duration(value)
            except ValueError as exc:
                problem((*path, key), str(exc))
    if spec.until is not None:
        try:
            parse_time(spec.until)
        except ValueError as exc:
            problem((*path, "until"), str(exc))
    if spec.timeout is not None and spec.event is None:
        problem((*path, "timeout"), "timeout is for an event wait (event: NAME); a timer ends by itself")


def _wait_node(spec: WaitSpec) -> WaitNode:
    return WaitNode(
        seconds=parse_duration(spec.for_) if spec.for_ is not None else None,
        until=parse_time(spec.until) if spec.until is not None else None,
        event=spec.event,
        timeout=parse_duration(spec.timeout) if spec.timeout is not None else None,
    )


def _build_executor(
    loaded: LoadedSpec,
    node: NodeSpec,
    path: Path_,
    agents: dict[str, AgentSpec],
    override: Model | str | None,
) -> Any:
    """What runs a node (``path``: where the node is in the file, for the files it includes)."""
    if node.agent is not None:
        return _build_agent(agents[node.agent], override)
    if node.function is not None:
        return import_object(node.function)
    if node.file is not None:
        included = loaded.included[path]
        return _build(included, included.spec, (), {}, override)
    if node.map is not None:
        return _build_map(loaded, node.map, (*path, "map"), agents, override)
    if node.wait is not None:
        return _wait_node(node.wait)
    kind = "graph" if node.graph is not None else "swarm"
    return _build(loaded, getattr(node, kind), (*path, kind), agents, override)


def _build_map(
    loaded: LoadedSpec, spec: MapSpec, path: Path_, agents: dict[str, AgentSpec], override: Model | str | None
) -> Map:
    body = spec.node
    join: Any = "all"
    if not isinstance(spec.join, str):
        join = spec.join.first if spec.join.first is not None else import_object(str(spec.join.until))
    options: dict[str, Any] = {"over": spec.over, "join": join, "max_concurrency": spec.max_concurrency}
    if isinstance(body, str):
        if ":" in body:
            return Map(import_object(body), **options)
        return Map(_build_agent(agents[body], override), **options)
    if body.agent is not None or body.function is not None or body.map is not None:
        return Map(_build_executor(loaded, body, (*path, "node"), agents, override), **options)
    # A nested graph or swarm holds one run's state: each item gets its own, built like this one.
    return Map(factory=lambda: _build_executor(loaded, body, (*path, "node"), agents, override), **options)


def _agent_of(node: NodeSpec, agents: dict[str, AgentSpec]) -> AgentSpec | None:
    """The agent a node runs (itself, or per item of a map), whose retry policy and budget it takes."""
    if node.agent is not None:
        return agents[node.agent]
    body = node.map.node if node.map is not None else None
    if isinstance(body, str) and ":" not in body:
        return agents[body]
    if isinstance(body, NodeSpec) and body.agent is not None:
        return agents[body.agent]
    return None


def _retry(spec: RetryPolicySpec | None) -> RetryPolicy | None:
    return RetryPolicy.from_json(spec.model_dump()) if spec is not None else None


def _budget(spec: BudgetSpec | None) -> Budget | None:
    return Budget.from_json(spec.model_dump(exclude_none=True)) if spec is not None else None


def _versioning(spec: PipelineSpec) -> dict[str, Any]:
    return {
        "version": spec.pipeline_version,
        "migrations": _migrations(spec.migrations) if spec.migrations else None,
    }


def _build(
    loaded: LoadedSpec,
    spec: PipelineSpec,
    prefix: Path_,
    outer_agents: dict[str, AgentSpec],
    override: Model | str | None,
    agent_session: Any = None,
) -> Graph | Swarm | Agent:
    agents = {**outer_agents, **{a.name: a for a in spec.agents}}
    limits = spec.limits
    if spec.kind == "agent":
        single = agents[spec.agent or spec.agents[0].name]
        built = _build_agent(single, override, agent_session)
        # The agent's own budget and retry policy (or the file's): each invocation's, each model call's.
        built.budget = _budget(single.budget or spec.budget)
        built.retry = _retry(single.retry or spec.retry)
        return built
    if spec.kind == "swarm":
        members = [n.agent for n in spec.nodes if n.agent] if spec.nodes else [a.name for a in spec.agents]
        options = {
            key: value
            for key in (
                "max_handoffs",
                "max_iterations",
                "execution_timeout",
                "node_timeout",
                "repetitive_handoff_detection_window",
                "repetitive_handoff_min_unique_agents",
            )
            if (value := getattr(limits, key)) is not None
        }
        swarm = Swarm(
            [_build_agent(agents[m], override) for m in members],
            entry_point=spec.entry_point,
            id=spec.id,
            state=spec.state,
            resume_from=spec.resume_from,
            history=spec.history,
            retry={m: p for m in members if (p := _retry(agents[m].retry or spec.retry)) is not None} or None,
            budget=_budget(spec.budget),
            budgets={m: b for m in members if (b := _budget(agents[m].budget)) is not None} or None,
            **_versioning(spec),
            **options,
        )
        swarm.spec = spec
        swarm.spec_dir = loaded.path.parent
        return swarm
    nodes: dict[str, Any] = {}
    joins: dict[str, Any] = {}
    retries: dict[str, RetryPolicy] = {}
    budgets: dict[str, Budget] = {}
    for index, node in enumerate(spec.nodes):
        node_id = node.id or node.agent
        assert node_id is not None
        path = (*prefix, "nodes", index)
        nodes[node_id] = _build_executor(loaded, node, path, agents, override)
        if node.join != "all":
            joins[node_id] = node.join
        agent = _agent_of(node, agents)
        policy = _retry(node.retry or (agent.retry if agent else None) or spec.retry)
        if policy is not None:
            retries[node_id] = policy
        budget = _budget(agent.budget if agent else None)
        if budget is not None:
            budgets[node_id] = budget
    edges = [
        (e.from_, e.to, SpecCondition(e.when, e.from_)) if e.when is not None else (e.from_, e.to)
        for e in spec.edges
    ]
    graph = Graph(
        nodes,
        edges,
        spec.entry_points or None,
        max_node_executions=limits.max_node_executions,
        execution_timeout=limits.execution_timeout,
        node_timeout=limits.node_timeout,
        reset_on_revisit=limits.reset_on_revisit,
        max_concurrency=limits.max_concurrency,
        joins=joins,
        id=spec.id,
        state=spec.state,
        retry=retries or None,
        budget=_budget(spec.budget),
        budgets=budgets or None,
        **_versioning(spec),
    )
    graph.spec = spec
    graph.spec_dir = loaded.path.parent
    return graph


def build(
    loaded: LoadedSpec,
    *,
    model: Model | str | None = None,
    session_id: str | None = None,
    storage: str | None = None,
    session_manager: Any = None,
    memory: Any = None,
) -> Graph | Swarm | Agent:
    """Build the object a parsed spec describes.

    Args:
        model: a model (or model string) for every agent, overriding the file (``--model``).
        session_id: attach a ``SnapshotSessionManager`` with this id (storage and strategy from the
            spec's ``session:``, or local files).
        storage: a storage URI overriding the spec's ``session.storage``.
        session_manager: a ready session manager to attach instead.
        memory: a ``MemoryStore`` to use instead of the one the spec's ``memory:`` names (the server
            passes its workspace's).
    """
    from orchestra.session import SnapshotSessionManager

    session = loaded.spec.session
    if session_manager is None and session_id is not None:
        uri = storage or (session.storage if session else "file:./.orchestra")
        session_manager = SnapshotSessionManager(
            session_id,
            storage=storage_from_uri(uri),
            multi_agent_save_latest_on=session.save_on if session else "node",
        )
    agent_session = session_manager if loaded.spec.kind == "agent" else None
    store = memory if memory is not None or loaded.spec.memory is None else memory_store(loaded.spec)
    with building_with(store, loaded.spec):
        built = _build(loaded, loaded.spec, (), {}, model, agent_session)
    if store is not None and isinstance(built, MultiAgentBase):
        built.memory = store
    if session_manager is not None and isinstance(built, MultiAgentBase):
        built.set_session_manager(session_manager)
    return built


def _build_checked(loaded: LoadedSpec, **options: Any) -> Graph | Swarm | Agent:
    try:
        return build(loaded, **options)
    except OrchestraSpecError:
        raise
    except (ConfigurationError, ValueError, TypeError) as exc:
        # The checks above catch what they can with positions; what only building finds is reported
        # against the document.
        raise OrchestraSpecError(loaded.located.error((), str(exc))) from exc


def load(
    path: str | os.PathLike[str],
    *,
    model: Model | str | None = None,
    session_id: str | None = None,
    storage: str | None = None,
) -> Graph | Swarm | Agent:
    """Load a pipeline spec (YAML) and build its Graph, Swarm or Agent.

    Raises:
        OrchestraSpecError: every problem in the file, each as ``file:line:column: field: message``.
    """
    return _build_checked(parse_file(path), model=model, session_id=session_id, storage=storage)
