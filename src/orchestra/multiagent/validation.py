"""Build-time checks of a graph's structure, with networkx.

networkx is imported when a graph is first checked, not with orchestra: it costs about 20 MB and 0.15 s,
which a program that runs only agents need not pay.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from orchestra.errors import GraphError

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["back_edges", "validate_graph"]


def validate_graph(
    node_ids: Sequence[str],
    edges: Iterable[tuple[str, str]],
    entry_points: Sequence[str],
    *,
    bounded: bool,
) -> nx.DiGraph[str]:
    """Check a graph and return it as a networkx DiGraph.

    Raises:
        GraphError: an edge or entry point names an unknown node; there is no entry point; some nodes
            are unreachable from every entry point; or a cycle has no bound (neither a maximum number of
            node executions nor an execution timeout). The message names the nodes involved.
    """
    import networkx as nx

    known = set(node_ids)
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(node_ids)
    for src, dst in edges:
        for end in (src, dst):
            if end not in known:
                raise GraphError(
                    f"edge {src} -> {dst}: unknown node {end!r} (nodes: {', '.join(sorted(known))})"
                )
        graph.add_edge(src, dst)
    for entry in entry_points:
        if entry not in known:
            raise GraphError(f"entry point {entry!r} is not a node (nodes: {', '.join(sorted(known))})")
    if not node_ids:
        raise GraphError("a graph needs at least one node")
    if not entry_points:
        raise GraphError(
            "the graph has no entry point: every node has an incoming edge; call set_entry_point(node_id)"
        )
    reachable = set(entry_points)
    for entry in entry_points:
        reachable |= nx.descendants(graph, entry)
    unreachable = [n for n in node_ids if n not in reachable]
    if unreachable:
        raise GraphError(
            f"nodes unreachable from every entry point ({', '.join(entry_points)}): {', '.join(unreachable)}; "
            "add an edge to them or make them entry points"
        )
    if not bounded:
        try:
            cycle = nx.find_cycle(graph)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            path = " -> ".join([cycle[0][0], *(dst for _, dst in cycle)])
            raise GraphError(
                f"the graph has a cycle with no bound: {path}; bound it with set_max_node_executions(n) "
                "or set_execution_timeout(seconds)"
            )
    return graph


def back_edges(graph: nx.DiGraph[str], entry_points: Sequence[str]) -> set[tuple[str, str]]:
    """The edges that close a cycle: in a depth-first walk from the entry points, edges to an ancestor.

    A loop's back edge re-activates the node it points to on its own; every other (forward) edge takes
    part in joins. Without back edges the forward edges form a DAG.
    """
    back: set[tuple[str, str]] = set()
    visited: set[str] = set()
    for entry in entry_points:
        if entry in visited:
            continue
        on_stack = {entry}
        visited.add(entry)
        stack = [(entry, iter(graph.successors(entry)))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_stack.discard(node)
            elif child in on_stack:
                back.add((node, child))
            elif child not in visited:
                visited.add(child)
                on_stack.add(child)
                stack.append((child, iter(graph.successors(child))))
    return back
