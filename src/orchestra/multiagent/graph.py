"""``Graph`` and ``GraphBuilder``: nodes along directed edges, with conditions, joins, loops and limits.

A Graph checks and builds its structure here, and runs: how a run is scheduled (which node is ready,
which edge fires) is ``GraphScheduler`` in ``_graph_schedule.py``, whose docstring states the rules, and
the local runner is ``_graph_run.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio

from orchestra.agent import Agent
from orchestra.budget import Budget
from orchestra.errors import GraphError
from orchestra.hooks import HookProvider, OrchestratorSessionManager
from orchestra.multiagent._graph_run import GraphRun
from orchestra.multiagent._graph_schedule import GraphScheduler, graph_output_source, graph_result
from orchestra.multiagent._graph_shape import Condition, Edge, GraphShape, GraphState, takes_invocation_state
from orchestra.multiagent.base import MultiAgentBase
from orchestra.multiagent.map import Map
from orchestra.multiagent.migrations import Migration
from orchestra.multiagent.nodes import Emit, Join, Node, configure_nodes
from orchestra.multiagent.results import GraphResult
from orchestra.multiagent.validation import back_edges, validate_graph
from orchestra.retry import RetryPolicy

__all__ = [
    "Condition",
    "Edge",
    "Graph",
    "GraphBuilder",
    "GraphState",
    "condition_id",
    "takes_invocation_state",
]


def _default_node_id(executor: Any) -> str:
    if isinstance(executor, Map):
        raise GraphError(f"a map node needs an id: add {executor!r} with node_id= (or as {{id: Map(...)}})")
    if isinstance(executor, Agent):
        return executor.name
    if isinstance(executor, MultiAgentBase):
        return executor.id
    name = getattr(executor, "__name__", None)
    if not name:
        raise GraphError(f"cannot name node {executor!r}: pass node_id=")
    return str(name)


@functools.lru_cache(maxsize=64)
def _checked_back_edges(
    ids: tuple[str, ...], edges: tuple[tuple[str, str], ...], entry_points: tuple[str, ...], bounded: bool
) -> frozenset[tuple[str, str]]:
    """Validate a structure and find its back edges, once per structure: a Temporal worker builds the
    same pipeline for every node it runs, and networkx's checks were a quarter of that build."""
    graph = validate_graph(ids, edges, entry_points, bounded=bounded)
    return frozenset(back_edges(graph, entry_points))


class Graph(MultiAgentBase):
    """Runs nodes along directed edges (``_graph_schedule.py`` states the scheduling rules).

    Args:
        nodes: ``{node_id: executor}``, or a list of executors (ids from agent names, function names,
            orchestrator ids). An executor is an ``Agent``, a ``Graph`` or ``Swarm``, or a function.
        edges: ``(src, dst)`` or ``(src, dst, condition)`` tuples, or ``Edge`` objects.
        entry_points: where the run starts; defaults to the nodes without incoming edges.
        max_node_executions: the most node executions in one run (bounds loops).
        execution_timeout: seconds one invocation may take.
        node_timeout: seconds one node execution may take.
        reset_on_revisit: reset an agent node to its initial state each time a loop runs it again.
        max_concurrency: the most nodes running at once (default: no limit).
        joins: ``{node_id: "any"}`` for nodes that start on the first incoming edge that fires.
        id: the graph's id (the session scope it is saved under).
        session_manager: persists the run after every node (or invocation) so it can resume.
        hooks: hook providers.
        state: the initial shared state, reset at the start of every fresh run.
        retry: a ``RetryPolicy`` for every node, or ``{node_id: RetryPolicy}`` (the others get
            ``DEFAULT_RETRY``: throttled and unavailable models, 3 attempts).
        budget: what one run may spend (``Budget``: tokens, cost, model calls, wall time).
        budgets: ``{node_id: Budget}``: what one agent node may spend in a run.
        version: the name of this version of the graph, recorded in every run it starts.
        migrations: ``{saved version: fn}``: how to carry over runs saved on an older version.
        memory: a ``MemoryStore`` every node reaches: ``invocation_state["memory"]`` for agents' memory tools
            and ``MemoryContext``, ``node_input.memory`` for function nodes.
    """

    kind = "graph"

    def __init__(
        self,
        nodes: Mapping[str, Any] | Sequence[Any],
        edges: Iterable[Edge | tuple[Any, ...]] = (),
        entry_points: Sequence[str] | None = None,
        *,
        max_node_executions: int | None = None,
        execution_timeout: float | None = None,
        node_timeout: float | None = None,
        reset_on_revisit: bool = False,
        max_concurrency: int | None = None,
        joins: Mapping[str, Join] | None = None,
        id: str = "graph",
        session_manager: OrchestratorSessionManager | None = None,
        hooks: Iterable[HookProvider] | None = None,
        state: Mapping[str, Any] | None = None,
        retry: RetryPolicy | Mapping[str, RetryPolicy] | None = None,
        budget: Budget | None = None,
        budgets: Mapping[str, Budget] | None = None,
        version: str | None = None,
        migrations: Mapping[str, Migration] | None = None,
        memory: Any = None,
    ) -> None:
        joins = dict(joins or {})
        built = self._build_nodes(nodes, joins)
        unknown_joins = set(joins) - set(built)
        if unknown_joins:
            raise GraphError(f"joins names unknown node(s): {', '.join(sorted(unknown_joins))}")
        configure_nodes(built, retry, budgets)
        raw_edges = [self._edge(e) for e in edges]
        ids = list(built)
        if entry_points is None or not list(entry_points):
            targets = {e.dst for e in raw_edges}
            entry_points = [n for n in ids if n not in targets]
        self.entry_points = list(entry_points)
        for limit, value in (
            ("max_node_executions", max_node_executions),
            ("execution_timeout", execution_timeout),
            ("node_timeout", node_timeout),
            ("max_concurrency", max_concurrency),
        ):
            if value is not None and value <= 0:
                raise GraphError(f"{limit} must be positive, got {value}")
        self.max_node_executions = max_node_executions
        self.execution_timeout = execution_timeout
        self.node_timeout = node_timeout
        self.reset_on_revisit = reset_on_revisit
        self.max_concurrency = max_concurrency
        back = _checked_back_edges(
            tuple(ids),
            tuple((e.src, e.dst) for e in raw_edges),
            tuple(self.entry_points),
            max_node_executions is not None or execution_timeout is not None,
        )
        self.edges = [
            Edge(e.src, e.dst, e.condition, (e.src, e.dst) in back, takes_invocation_state(e.condition))
            if e.condition is not None
            else Edge(e.src, e.dst, None, (e.src, e.dst) in back)
            for e in raw_edges
        ]
        self.shape = GraphShape.of(ids, self.edges, self.entry_points)
        """The structure its scheduler reads: each node's out-edges and forward predecessors."""
        super().__init__(
            built,
            id=id,
            session_manager=session_manager,
            hooks=hooks,
            state=state,
            budget=budget,
            version=version,
            migrations=migrations,
            memory=memory,
        )

    # -- construction ---------------------------------------------------------------------------------

    @staticmethod
    def _build_nodes(nodes: Mapping[str, Any] | Sequence[Any], joins: Mapping[str, Join]) -> dict[str, Node]:
        pairs: list[tuple[str, Any]]
        if isinstance(nodes, Mapping):
            pairs = list(nodes.items())
        else:
            pairs = []
            for item in nodes:
                if isinstance(item, Node):
                    pairs.append((item.node_id, item))
                elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                    pairs.append(item)
                else:
                    pairs.append((_default_node_id(item), item))
        built: dict[str, Node] = {}
        seen: dict[int, str] = {}
        for node_id, executor in pairs:
            if node_id in built:
                raise GraphError(f"duplicate node id {node_id!r}: node ids must be unique")
            inner = executor.executor if isinstance(executor, Node) else executor
            # A plain function holds no state, so several nodes may share one; agents and orchestrators may not.
            stateful = isinstance(inner, Agent | MultiAgentBase)
            if stateful and id(inner) in seen:
                raise GraphError(
                    f"the same executor was added twice, as {seen[id(inner)]!r} and {node_id!r}; "
                    "create a separate Agent (or function wrapper) for each node"
                )
            seen[id(inner)] = node_id
            if isinstance(executor, Node):
                built[node_id] = executor
            else:
                built[node_id] = Node(node_id, executor, joins.get(node_id, "all"))
        return built

    @staticmethod
    def _edge(spec: Edge | tuple[Any, ...]) -> Edge:
        if isinstance(spec, Edge):
            return spec
        if isinstance(spec, tuple) and len(spec) in (2, 3):
            src, dst = (s if isinstance(s, str) else _default_node_id(s) for s in spec[:2])
            condition = spec[2] if len(spec) == 3 else None
            if condition is not None and not callable(condition):
                raise GraphError(f"edge {src} -> {dst}: the condition {condition!r} is not callable")
            return Edge(src, dst, condition)
        raise GraphError(f"an edge is (src, dst) or (src, dst, condition), not {spec!r}")

    # -- structure (what a remote scheduler needs, without the executors) -----------------------------

    def structure(self) -> dict[str, Any]:
        """The graph's shape and limits as JSON: enough to schedule it elsewhere (see ``from_structure``)."""
        structure = {
            "kind": "graph",
            "id": self.id,
            "nodes": {n: _node_structure(node) for n, node in self.nodes.items()},
            "edges": [[e.src, e.dst, condition_id(e.condition)] for e in self.edges],
            "entry_points": list(self.entry_points),
            "state": dict(self._initial_state),
            "limits": {
                "max_node_executions": self.max_node_executions,
                "execution_timeout": self.execution_timeout,
                "node_timeout": self.node_timeout,
                "reset_on_revisit": self.reset_on_revisit,
                "max_concurrency": self.max_concurrency,
            },
        }
        if self.version is not None:
            structure["version"] = self.version
        return structure

    @classmethod
    def from_structure(cls, structure: dict[str, Any]) -> Graph:
        """A graph with the same nodes, edges and limits whose executors are stand-ins that never run.

        A Temporal workflow schedules with it: the decisions are this class's, the nodes run in activities
        (where conditions are evaluated too, so conditional edges get a stand-in condition here).
        """

        def stand_in(spec: dict[str, Any], node_id: str) -> Any:
            kind = spec["kind"]
            if kind == "agent":
                return Agent(name=node_id)
            if kind == "orchestrator":
                return Graph({"stand_in": _never_runs}, id=node_id)
            if kind == "map":
                return Map.stand_in(spec["map"])
            return _never_runs

        nodes = {
            n: Node(
                n,
                stand_in(spec, n),
                spec.get("join", "all"),
                retry=RetryPolicy.from_json(spec["retry"]) if "retry" in spec else None,
            )
            for n, spec in structure["nodes"].items()
        }
        joins = {
            n: spec["join"] for n, spec in structure["nodes"].items() if spec.get("join", "all") != "all"
        }
        edges = [
            (src, dst, _RemoteCondition(str(condition))) if condition else (src, dst)
            for src, dst, condition in structure["edges"]
        ]
        return cls(
            nodes,
            edges,
            structure["entry_points"],
            joins=joins,
            id=structure["id"],
            state=structure.get("state"),
            version=structure.get("version"),
            **structure["limits"],
        )

    def topology(self, legacy: bool = False) -> dict[str, Any]:
        if legacy:
            return {
                **super().topology(legacy),
                "edges": sorted([e.src, e.dst, e.condition is not None] for e in self.edges),
                "entry_points": sorted(self.entry_points),
            }
        topology = {
            **super().topology(),
            "joins": {n: node.join for n, node in sorted(self.nodes.items())},
            "edges": sorted([e.src, e.dst, condition_id(e.condition) or ""] for e in self.edges),
            "entry_points": sorted(self.entry_points),
        }
        maps = {n: node.executor.topology() for n, node in sorted(self.nodes.items()) if node.kind == "map"}
        if maps:  # only then: the hashes of graphs without maps stay what earlier versions saved
            topology["maps"] = maps
        return topology

    # -- the run ----------------------------------------------------------------------------------------

    def scheduler(self) -> GraphScheduler:
        """A scheduler of this graph's run document (one per invocation: see ``GraphScheduler``)."""
        return GraphScheduler(
            self.shape,
            self.document,
            self.nodes,
            max_node_executions=self.max_node_executions,
            budget=self.budget,
            what=f"{self.kind} {self.id!r}",
        )

    def build_result(self) -> GraphResult:
        """The run in the document as a ``GraphResult`` (as the run returned it, or would have so far)."""
        return graph_result(self.document, self.shape, len(self.nodes))

    def output_source(self) -> dict[str, Any] | None:
        """Which node gave the output of the run that just completed (see ``NodeResult.output_from``)."""
        return graph_output_source(self.document, self.shape)

    async def _run(
        self, invocation_state: dict[str, Any], emit: Emit | None, responses: dict[str, Any]
    ) -> GraphResult:
        scheduler = self.scheduler()
        scheduler.begin()
        run = GraphRun(
            self,
            scheduler,
            invocation_state,
            emit,
            responses,
            max_concurrency=self.max_concurrency,
            node_timeout=self.node_timeout,
            reset_on_revisit=self.reset_on_revisit,
        )
        if self.execution_timeout is None:
            await run.loop()
        else:
            with anyio.move_on_after(self.execution_timeout) as scope:
                await run.loop()
            if scope.cancelled_caught:
                scheduler.fail(f"execution_timeout ({self.execution_timeout:g}s) exceeded")
        scheduler.finish()
        return self.build_result()


def _node_structure(node: Node) -> dict[str, Any]:
    """A node as a remote scheduler needs it: its kind and join, a map's join and width, its retries."""
    out: dict[str, Any] = {"kind": node.kind, "join": node.join}
    if node.kind == "map":
        spec: Map = node.executor
        out["map"] = _map_structure(spec)
    if node.retry is not None:
        out["retry"] = node.retry.to_json()
    return out


def _map_structure(spec: Map) -> dict[str, Any]:
    """A map's join and width, and its nested map's (a Temporal workflow runs a nested map's items too)."""
    out: dict[str, Any] = {"topology": spec.topology(), "max_concurrency": spec.max_concurrency}
    if isinstance(spec.node, Map):
        out["inner"] = _map_structure(spec.node)
    return out


def _never_runs(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a stand-in node of a scheduling skeleton was asked to run")


class _RemoteCondition:
    """A skeleton's stand-in for a condition: it keeps the condition's id, for the topology hash."""

    def __init__(self, condition_id: str) -> None:
        self.condition_id = condition_id

    def __call__(self, state: GraphState) -> bool:
        raise RuntimeError("conditions of a scheduling skeleton are evaluated where the node ran")


def condition_id(condition: Condition | None) -> str | None:
    """What identifies a condition in the topology hash: its ``condition_id`` (YAML conditions: their
    spec) or, for a Python callable, its qualified name."""
    if condition is None:
        return None
    named = getattr(condition, "condition_id", None)
    if named is not None:
        return str(named)
    module = getattr(condition, "__module__", None) or type(condition).__module__
    qualname = getattr(condition, "__qualname__", None) or type(condition).__qualname__
    return f"{module}:{qualname}"


class GraphBuilder:
    """Builds a :class:`Graph` step by step (the same options as the constructor)."""

    def __init__(self) -> None:
        self._nodes: dict[str, Any] = {}
        self._joins: dict[str, Join] = {}
        self._edges: list[tuple[str, str, Condition | None]] = []
        self._entry_points: list[str] = []
        self._options: dict[str, Any] = {}
        self._retry: dict[str, RetryPolicy] = {}
        self._budgets: dict[str, Budget] = {}

    def add_node(
        self,
        executor: Any,
        node_id: str | None = None,
        *,
        join: Join = "all",
        retry: RetryPolicy | None = None,
        budget: Budget | None = None,
    ) -> GraphBuilder:
        """Add an Agent, a Graph or Swarm, a ``Map``, or a function; ``node_id`` defaults to its name.

        ``retry`` is the node's retry policy; ``budget`` what the (agent) node may spend in a run.
        """
        node_id = node_id or _default_node_id(executor)
        if node_id in self._nodes:
            raise GraphError(f"duplicate node id {node_id!r}: node ids must be unique")
        # Refuse bad executors (an agent with a session manager) and options right away.
        Node(node_id, executor, join, retry=retry, budget=budget)
        self._nodes[node_id] = executor
        self._joins[node_id] = join
        if retry is not None:
            self._retry[node_id] = retry
        if budget is not None:
            self._budgets[node_id] = budget
        return self

    def add_edge(self, src: Any, dst: Any, condition: Condition | None = None) -> GraphBuilder:
        """Add an edge between two node ids (or executors); ``condition(state)`` decides if it fires."""
        ids = [n if isinstance(n, str) else _default_node_id(n) for n in (src, dst)]
        self._edges.append((ids[0], ids[1], condition))
        return self

    def set_entry_point(self, node_id: str) -> GraphBuilder:
        """Add an entry point (by default: the nodes with no incoming edge)."""
        self._entry_points.append(node_id)
        return self

    def set_max_node_executions(self, n: int) -> GraphBuilder:
        self._options["max_node_executions"] = n
        return self

    def set_execution_timeout(self, seconds: float) -> GraphBuilder:
        self._options["execution_timeout"] = seconds
        return self

    def set_node_timeout(self, seconds: float) -> GraphBuilder:
        self._options["node_timeout"] = seconds
        return self

    def reset_on_revisit(self, enabled: bool = True) -> GraphBuilder:
        self._options["reset_on_revisit"] = enabled
        return self

    def set_max_concurrency(self, n: int) -> GraphBuilder:
        self._options["max_concurrency"] = n
        return self

    def set_graph_id(self, graph_id: str) -> GraphBuilder:
        self._options["id"] = graph_id
        return self

    def set_session_manager(self, session_manager: OrchestratorSessionManager) -> GraphBuilder:
        self._options["session_manager"] = session_manager
        return self

    def set_hooks(self, hooks: Iterable[HookProvider]) -> GraphBuilder:
        self._options["hooks"] = list(hooks)
        return self

    def set_budget(self, budget: Budget) -> GraphBuilder:
        """What one run may spend (see ``Budget``)."""
        self._options["budget"] = budget
        return self

    def set_version(self, version: str, migrations: Mapping[str, Migration] | None = None) -> GraphBuilder:
        """Name this version of the graph, and how runs saved on older versions are carried over."""
        self._options["version"] = version
        self._options["migrations"] = dict(migrations or {})
        return self

    def build(self) -> Graph:
        """Validate and build the graph.

        Raises:
            GraphError: see :func:`orchestra.multiagent.validation.validate_graph`.
        """
        return Graph(
            self._nodes,
            [(s, d, c) if c is not None else (s, d) for s, d, c in self._edges],
            self._entry_points or None,
            joins={n: j for n, j in self._joins.items() if j != "all"},
            retry=self._retry or None,
            budgets=self._budgets or None,
            **self._options,
        )
