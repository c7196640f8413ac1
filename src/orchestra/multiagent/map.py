"""``Map``: a node that fans out over a list known only at run time, one item at a time per instance.

``Graph({"split": split, "summarize": Map(summarizer, over="split"), "merge": merge}, edges)`` runs one
instance of ``summarizer`` per item of the list ``split`` returned, in parallel (at most
``max_concurrency`` at once), then ``merge`` receives the list of their outputs, in item order.

- ``node`` is what runs per item: a function (called with a ``NodeInput`` whose ``item`` and ``index``
  are set), an ``Agent`` (a fresh copy per item, prompted with the item), or another ``Map`` (a nested
  fan-out over an item that is itself a list). ``factory=`` builds what runs per item instead (a
  ``Graph`` or ``Swarm``, or an agent built afresh): each item gets its own.
- ``over`` says where the list comes from: the predecessor's output (the default), ``"node"`` (that
  node's output), ``"node.field.path"`` (a field of it), ``"state.key"`` (the shared state), or a
  function of the ``NodeInput``.
- ``join`` says when the map is done: ``"all"`` items (the default), the first ``K`` to complete
  (``join=K``), or once ``join(items)`` is true (called with the completed ``MapItem``s after each one);
  the items still running then are cancelled.

Durability: the list is saved before any item runs, and each item's result is saved on its own as it
completes (items that complete together share one save). A resumed run runs only the items without a
result: an item that completed never runs again; one that was running when the process died runs again
from its start. Each item has the node's retry policy. An item that fails (after its retries) fails the
node, and the run; resuming it runs the failed and the missing items only. A budget reached stops new
items; the run is saved as interrupted and resumes with the rest.

The run document keeps a map's progress (see ``MapScheduler``, ``_map_schedule.py``): the list, and
each item's result and attempts. Once the map completes they are removed: its output is in the node's
result.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from orchestra.agent import Agent
from orchestra.errors import GraphError, ModelNotConfiguredError
from orchestra.multiagent._orchestrator import Orchestrator

__all__ = ["Map", "MapItem"]

Over = str | Callable[..., Sequence[Any]] | None
TemplateKind = Literal["function", "agent", "map", "factory"]


@dataclass(frozen=True)
class MapItem:
    """A completed item, as ``join`` conditions see it."""

    index: int
    item: Any
    output: Any


class Map:
    """A node that runs ``node`` (or what ``factory`` builds) once per item of a list (see the module).

    Args:
        node: what runs per item: a function, an ``Agent`` (copied per item) or a nested ``Map``.
        factory: instead of ``node``: a function of no arguments that builds what runs per item (an
            ``Agent``, a ``Graph`` or a ``Swarm``).
        over: where the list comes from (default: the predecessor's output).
        join: ``"all"``, the number of items to wait for, or ``fn(items) -> bool``.
        max_concurrency: the most items running at once (default: no limit).
    """

    def __init__(
        self,
        node: Any = None,
        *,
        factory: Callable[[], Any] | None = None,
        over: Over = None,
        join: Literal["all"] | int | Callable[[list[MapItem]], bool] = "all",
        max_concurrency: int | None = None,
    ) -> None:
        if (node is None) == (factory is None):
            raise GraphError("Map needs exactly one of node= (a function, an Agent, a Map) or factory=")
        if isinstance(node, Orchestrator):
            raise GraphError(
                f"Map: a {type(node).__name__} holds the state of one run, so it cannot run several items at "
                "once; pass factory= (a function that builds it) and each item gets its own"
            )
        if node is not None and not (isinstance(node, Agent | Map) or callable(node)):
            raise GraphError(f"Map: {node!r} cannot run an item; use a function, an Agent or a Map")
        if isinstance(node, Agent) and node.session_manager is not None:
            raise GraphError(
                f"Map: agent {node.name!r} has its own session manager; the graph persists items"
            )
        if isinstance(node, Agent):
            refuse_side_effects(node)
        if join != "all" and not callable(join) and not (isinstance(join, int) and join >= 1):
            raise GraphError(f"Map: join is 'all', a number of items (1 or more) or a function, not {join!r}")
        if max_concurrency is not None and max_concurrency < 1:
            raise GraphError(f"Map: max_concurrency must be positive, got {max_concurrency}")
        if over is not None and not (isinstance(over, str) or callable(over)):
            raise GraphError(f"Map: over is a node id, node.field, state.key or a function, not {over!r}")
        self.node = node
        self.factory = factory
        self.over = over
        self.join = join
        self.max_concurrency = max_concurrency
        self._remote: dict[str, Any] | None = None  # a stand-in's topology (see stand_in)

    def __repr__(self) -> str:
        return f"Map({self.template_kind}, over={self.over!r}, join={self.join_spec()})"

    @property
    def template_kind(self) -> TemplateKind:
        if self.factory is not None:
            return "factory"
        if isinstance(self.node, Agent):
            return "agent"
        if isinstance(self.node, Map):
            return "map"
        return "function"

    def join_spec(self) -> dict[str, Any]:
        """The join as JSON: ``{"mode": "all"}``, ``{"mode": "first", "count": K}`` or ``{"mode": "until"}``."""
        if self.join == "all":
            return {"mode": "all"}
        if isinstance(self.join, int):
            return {"mode": "first", "count": self.join}
        name = getattr(self.join, "__qualname__", type(self.join).__qualname__)
        return {"mode": "until", "condition": f"{getattr(self.join, '__module__', '')}:{name}"}

    def topology(self) -> dict[str, Any]:
        """What the topology hash sees of this map: the join and what runs per item."""
        if self._remote is not None:
            return dict(self._remote)
        inner = self.node.topology() if isinstance(self.node, Map) else None
        return {"join": self.join_spec(), "node": self.template_kind, **({"inner": inner} if inner else {})}

    @classmethod
    def stand_in(cls, structure: dict[str, Any]) -> Map:
        """A scheduling skeleton's map (see ``Graph.from_structure``): the same join, width and topology,
        and a stand-in of its nested map (``inner``: descriptions made before it had none); its items run
        elsewhere, and an ``until`` join is decided there too."""
        join = structure["topology"]["join"]
        count: Literal["all"] | int = join["count"] if join["mode"] == "first" else "all"
        inner = structure.get("inner")
        node = cls.stand_in(inner) if inner else _never_runs
        stand_in = cls(node, join=count, max_concurrency=structure.get("max_concurrency"))
        stand_in._remote = structure["topology"]
        return stand_in

    @property
    def decided_remotely(self) -> bool:
        """Whether the join is a condition only the items' side can evaluate (a skeleton's ``until``)."""
        return self._remote is not None and self._remote["join"]["mode"] == "until"

    def nested(self, key: str) -> Map:
        """The map that runs under ``key`` (see ``MapScheduler``): this one (``<node>``), or a nested one
        (``<node>:<i>``, ``<node>:<i>:<j>``: one level down per index)."""
        spec = self
        for _ in range(key.count(":")):
            if not isinstance(spec.node, Map):
                raise GraphError(f"map {key!r}: {spec!r} has no nested map")
            spec = spec.node
        return spec

    # -- per item --------------------------------------------------------------------------------------

    def item_executor(self) -> Any:
        """What runs one item: the function, a fresh copy of the agent, the nested map, or a new build."""
        if self.factory is not None:
            built = self.factory()
            if not isinstance(built, Agent | Orchestrator) and not callable(built):
                raise GraphError(f"Map: the factory built {built!r}, which cannot run an item")
            if isinstance(built, Agent):
                refuse_side_effects(built)
            return built
        if isinstance(self.node, Agent):
            return copy_agent(self.node)
        return self.node

    def restore_output(self, outputs: Any) -> Any:
        """The items' outputs read back from JSON (see ``restore_item``), in a list as the map gives them."""
        return [self.restore_item(output) for output in outputs] if isinstance(outputs, list) else outputs

    def restore_item(self, output: Any) -> Any:
        """An item's output read back from JSON as the model it was: an ``Agent`` template's structured
        output, or a nested map's items'. (What a ``factory`` builds is not known before it runs: its
        items' outputs stay JSON.)"""
        if output is None or isinstance(output, BaseModel):
            return output
        if isinstance(self.node, Map):
            return self.node.restore_output(output)
        output_type = self.node.output_type if isinstance(self.node, Agent) else None
        return output_type.model_validate(output, by_alias=True, by_name=True) if output_type else output

    def satisfied(self, done: list[MapItem], count: int) -> bool:
        """Whether the map is done, with the ``done`` items completed out of ``count`` (an ``until``
        condition sees them in item order)."""
        if self.join == "all":
            return len(done) >= count
        if isinstance(self.join, int):
            return len(done) >= min(self.join, count)
        return len(done) >= count or bool(self.join(sorted(done, key=_by_index)))


def _by_index(item: MapItem) -> int:
    return item.index


def _never_runs(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a stand-in map of a scheduling skeleton was asked to run an item")


def refuse_side_effects(agent: Agent) -> None:
    """A map item's agent keeps no open turn between attempts (a graph's agent node does): a retried or
    resumed item starts its turn over, so a side-effecting tool could run twice. Refused up front."""
    effects = sorted(tool.name for tool in agent.tool_registry if getattr(tool, "effects", False))
    if effects:
        raise GraphError(
            f"Map: agent {agent.name!r} has side-effecting tools ({', '.join(effects)}); a retried or resumed "
            "map item starts its turn over and could run them twice. Give them to an agent node of the graph "
            "instead"
        )


def copy_agent(agent: Agent) -> Agent:
    """A fresh agent with ``agent``'s settings and its state as built (not its current conversation).

    The copy shares the template's hooks (hook providers, budgets) and tools."""
    try:
        model: Any = agent.model
    except ModelNotConfiguredError:
        model = None  # the copy fails at its first call, with the same message
    clone = Agent(
        model=model,
        tools=list(agent.tool_registry),
        system_prompt=agent.system_prompt,
        conversation_manager=copy.deepcopy(agent.conversation_manager),
        name=agent.name,
        description=agent.description,
        max_cycles=agent.max_cycles,
        output_type=agent.output_type,
        max_output_retries=agent.max_output_retries,
        state=agent.state.to_dict(),
        record_direct_tool_call=agent.record_direct_tool_call,
        budget=agent.budget,
        retry=agent.retry,
    )
    clone.hooks = agent.hooks
    return clone


def item_prompt(task: Any, item: Any, index: int, count: int) -> Any:
    """What an agent (or a nested graph) running one item receives: the task, then the item."""
    text = item if isinstance(item, str) else json.dumps(item, default=str)
    addition = f"Item {index + 1} of {count}:\n{text}"
    if isinstance(task, list):
        return [*task, {"text": addition}]
    if task is None:
        return addition
    head = task if isinstance(task, str) else json.dumps(task, default=str)
    return f"{head}\n\n{addition}"


# -- where the list comes from ----------------------------------------------------------------------------


def resolve_items(spec: Map, node_id: str, node_input: Any, orchestrator: Orchestrator) -> list[Any]:
    """The list a map node fans out over (``over``), checked: a JSON list.

    Raises:
        GraphError: ``over`` names nothing, or gives something that is not a JSON list.
    """
    over = spec.over
    source: str
    value: Any
    if callable(over):
        value = over(node_input) if inspect.signature(over).parameters else over()
        source = f"over={getattr(over, '__qualname__', over)!r}"
    elif over is None:
        if node_input.item is not None and node_input.index is not None:
            value, source = node_input.item, "its item"  # a nested map: the outer item
        elif len(node_input.inputs) == 1:
            ((pred, value),) = node_input.inputs.items()
            source = f"the output of {pred!r}"
        elif not node_input.inputs:
            value, source = node_input.task, "the task"
        else:
            raise GraphError(
                f"map node {node_id!r} has several inputs ({', '.join(node_input.inputs)}); say which to fan out "
                "over with over='<node id>'"
            )
    else:
        value, source = _lookup(over, node_id, orchestrator), f"over={over!r}"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        raise GraphError(
            f"map node {node_id!r}: {source} is a {type(value).__name__}, not a list; a map fans out over a "
            "list (return one, or point over= at one)"
        )
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise GraphError(
            f"map node {node_id!r}: the items from {source} are not JSON ({exc}); they are saved"
        ) from None
    return value


def _lookup(path: str, node_id: str, orchestrator: Orchestrator) -> Any:
    head, _, rest = path.partition(".")
    if head == "state" and head not in orchestrator.nodes:
        key, _, rest = rest.partition(".")
        value = orchestrator.state.get(key)
    elif head in orchestrator.nodes:
        result = orchestrator.document.result(head)
        if result is None or result.status.value != "completed":
            raise GraphError(
                f"map node {node_id!r}: over={path!r} names node {head!r}, which has not completed"
            )
        value = result.output
    else:
        raise GraphError(
            f"map node {node_id!r}: over={path!r} names no node and is not state.<key> "
            f"(the nodes: {', '.join(orchestrator.nodes)})"
        )
    for part in rest.split(".") if rest else []:
        if isinstance(value, BaseModel):
            value = getattr(value, part, None)
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            value = None
        if value is None:
            raise GraphError(f"map node {node_id!r}: over={path!r}: there is no field {part!r}")
    return value
