"""What the other packages use of ``orchestra.multiagent`` is its public API: no module outside it reads or
writes a private member of its objects or imports one of its ``_`` modules, and no import circle runs
through it (read from the sources, as written)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

SRC = Path(__file__).parent.parent.parent / "src"
PACKAGE = SRC / "orchestra" / "multiagent"


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "orchestra").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _private_members() -> set[str]:
    """The private methods and attributes multiagent's classes define (``def _x``, ``self._x = ...``)."""
    names = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = node.name
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                name = node.attr
            else:
                continue
            if name.startswith("_") and not name.startswith("__"):
                names.add(name)
    return names


def test_no_module_outside_multiagent_reaches_into_its_privates():
    private = _private_members()
    reaches = []
    for name, path in _modules().items():
        if name.startswith("orchestra.multiagent"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in private
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                reaches.append(f"{name}:{node.lineno}: .{node.attr}")
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                "orchestra.multiagent"
            ):
                continue
            if any(part.startswith("_") for part in node.module.split(".")) or any(
                alias.name.startswith("_") for alias in node.names
            ):
                reaches.append(f"{name}:{node.lineno}: from {node.module} import ...")
    assert reaches == []


def _import_graph() -> nx.DiGraph:
    """Imports made when a module is imported (module level, ``if TYPE_CHECKING`` blocks included)."""
    modules = _modules()
    graph: nx.DiGraph = nx.DiGraph()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for name, path in modules.items():
        graph.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        pending: list[ast.AST] = [ast.parse(path.read_text())]
        while pending:
            for node in ast.iter_child_nodes(pending.pop()):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue  # imported when called, not with the module
                pending.append(node)
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                        base = ".".join([*parts, *([base] if base else [])])
                    targets = [f"{base}.{alias.name}" for alias in node.names]
                else:
                    continue
                for target in targets:
                    resolved = resolve(target) if target.startswith("orchestra") else None
                    if resolved is not None and resolved != name:
                        graph.add_edge(name, resolved)
    return graph


def test_no_import_circle_runs_through_multiagent():
    circles = [
        sorted(component)
        for component in nx.strongly_connected_components(_import_graph())
        if len(component) > 1 and any(m.startswith("orchestra.multiagent") for m in component)
    ]
    assert circles == []
