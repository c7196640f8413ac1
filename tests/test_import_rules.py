"""The layering rules of ``src/orchestra`` (issue 33, point 4), read from the source with ``ast``.

1. **No import circles.** Modules are the nodes; an import made when a module loads (at module level,
   ``TYPE_CHECKING`` blocks included, since they are the same dependency spelled for the type checker) is
   an edge, and no module may reach itself along such edges. Importing ``orchestra.P.m`` from outside
   package ``P`` at run time also runs ``orchestra/P/__init__.py`` first, so it is an edge to that too
   (not for a ``TYPE_CHECKING`` import, which runs nothing). Imports inside functions run later, when the
   call is made: they never break a load, so they are a graph of their own, reported
   (``python tests/test_import_rules.py``) but not counted as circles, except among the ``ENFORCED``
   packages: there a function-level import may not close a circle either (an import put inside a
   function to dodge a circle is still one).
2. **No private reaches.** A package is a first-level subpackage of ``orchestra`` (``orchestra.agent``,
   ``orchestra.hooks``, ...); a module directly under ``orchestra`` is a package of its own. Outside a
   package, nothing imports its ``_`` modules or its ``_`` names, and nothing reads, writes or passes
   (``f(_name=...)``) a ``_`` attribute that only that package defines (read statically, without types:
   a name the reaching package defines too counts as its own; ``self``/``cls`` are always their own;
   names nothing in ``orchestra`` defines, such as ``sys._getframe``, are not ours). The root's own
   ``_`` modules (``orchestra._ids``, ``_logging``, ``_sync``, ...) are private to ``orchestra`` as a
   whole, which every package is part of: any package may import them (their ``_`` names stay theirs).

``ENFORCED`` names the packages the rules hold for: every package since issue 33's rebuild (narrow it
only to bring a new package in step by step; ``python tests/test_import_rules.py`` reports the others).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = "orchestra"

ALL = None  # every package
ENFORCED: frozenset[str] | None = ALL

# Exceptions allowed for now, each with why; at most ten in all.
# Reaches: (the importing or reaching module, the private name).
ALLOWED: dict[tuple[str, str], str] = {}
# Circles: the modules of one circle.
ALLOWED_CIRCLES: dict[frozenset[str], str] = {}
# Imports inside a function that call a layer above: (the importing module, the imported module).
ALLOWED_CALLS_UP: dict[tuple[str, str], str] = {
    ("orchestra.multiagent.base", "orchestra.spec"): (
        "Graph.from_yaml / to_yaml, the documented one-line way to load a pipeline, call the spec layer "
        "that builds orchestrators; only when called, so loading multiagent never loads spec"
    ),
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module
    names: tuple[str, ...]  # ``from target import names``
    lazy: bool  # inside a function
    line: int
    typing: bool = False  # under ``if TYPE_CHECKING:``


@dataclass(frozen=True)
class Reach:
    module: str
    name: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.what}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> dict[str, tuple[Path, ast.Module]]:
    return {
        module_name(path): (path, ast.parse(path.read_text(), str(path)))
        for path in sorted((SRC / ROOT).rglob("*.py"))
    }


def package_of(module: str) -> str:
    """``orchestra.agent._loop`` -> ``agent``; ``orchestra.tracing`` -> ``tracing``; the root -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_of(module: str, tree: ast.Module, is_package: bool, known: set[str]) -> Iterator[Import]:
    def visit(node: ast.AST, lazy: bool, typing: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    yield from visit(ast.Module(body=[statement], type_ignores=[]), lazy, True)
                for statement in child.orelse:
                    yield from visit(ast.Module(body=[statement], type_ignores=[]), lazy, typing)
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == ROOT:
                        yield Import(module, alias.name, (), lazy, child.lineno, typing)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".")
                    base = base[: len(base) - child.level + (1 if is_package else 0)]
                    target = ".".join([*base, child.module] if child.module else base)
                else:
                    target = child.module or ""
                if target.split(".")[0] != ROOT:
                    continue
                names = tuple(alias.name for alias in child.names)
                submodules = [n for n in names if f"{target}.{n}" in known]  # ``from package import module``
                if len(submodules) < len(names):
                    yield Import(module, target, names, lazy, child.lineno, typing)
                for name in submodules:
                    yield Import(module, f"{target}.{name}", (), lazy, child.lineno, typing)
            else:
                yield from visit(child, inner, typing)

    yield from visit(tree, False, False)


def import_graph(modules: dict[str, tuple[Path, ast.Module]]) -> list[Import]:
    known = set(modules)
    edges: list[Import] = []
    for module, (path, tree) in modules.items():
        for imp in _imports_of(module, tree, path.name == "__init__.py", known):
            if imp.target not in known:
                continue
            edges.append(imp)
            # Importing orchestra.P.m from outside P runs orchestra/P/__init__.py first (at run time: a
            # type checker reads the module alone).
            package = f"{ROOT}.{package_of(imp.target)}"
            crosses = package_of(module) != package_of(imp.target)
            if package != imp.target and package in known and crosses and not imp.typing:
                edges.append(Import(module, package, (), imp.lazy, imp.line))
    return edges


def circles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a module importing itself)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def connect(node: str) -> None:  # Tarjan's algorithm
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def _defined_private_names(tree: ast.Module) -> set[str]:
    """The ``_`` names a module defines: functions, classes, assignments, attributes set on anything,
    dataclass fields and parameters."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            if not isinstance(node, ast.ClassDef):
                arguments = node.args
                for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                    names.add(arg.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[-1])
    return {name for name in names if is_private(name)}


def reaches(modules: dict[str, tuple[Path, ast.Module]]) -> list[Reach]:
    """Every import of another package's ``_`` module or name, and every use of a ``_`` attribute that only
    other packages define."""
    owners: dict[str, set[str]] = defaultdict(set)  # a private name -> the packages that define it
    for module, (_path, tree) in modules.items():
        for name in _defined_private_names(tree):
            owners[name].add(package_of(module))
    found: list[Reach] = []
    for module, (path, tree) in modules.items():
        here = package_of(module)
        for imp in _imports_of(module, tree, path.name == "__init__.py", set(modules)):
            there = package_of(imp.target)
            if there == here:
                continue
            inner = imp.target.split(".")[2:] if there else imp.target.split(".")[1:]
            private_parts = [p for p in inner if is_private(p)]
            if there and private_parts:
                found.append(Reach(module, imp.target, imp.line, f"imports the private module {imp.target}"))
            for name in imp.names:
                if is_private(name):
                    found.append(
                        Reach(module, name, imp.line, f"imports the private name {name} from {imp.target}")
                    )
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                    continue
                if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                    continue
                name = node.attr
                what = "reads" if isinstance(node.ctx, ast.Load) else "writes"
            elif isinstance(node, ast.keyword) and node.arg is not None and is_private(node.arg):
                name, what = node.arg, "passes"
            else:
                continue
            defined_by = owners.get(name, set())
            if defined_by and here not in defined_by:
                found.append(
                    Reach(
                        module,
                        name,
                        node.lineno,
                        f"{what} {name}, private to {', '.join(sorted(defined_by))}",
                    )
                )
    return found


def enforced(module: str) -> bool:
    return ENFORCED is ALL or package_of(module) in ENFORCED


def test_no_import_circles() -> None:
    edges = [e for e in import_graph(sources()) if not e.lazy]
    found = [c for c in circles(edges) if frozenset(c) not in ALLOWED_CIRCLES]
    assert not found, "import circles (module-level imports, TYPE_CHECKING included):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_no_circles_among_the_enforced_packages_even_through_function_imports() -> None:
    edges = [
        e
        for e in import_graph(sources())
        if package_of(e.source)
        and package_of(e.target)
        and enforced(e.source)
        and enforced(e.target)
        and not (e.lazy and (e.source, e.target) in ALLOWED_CALLS_UP)
    ]
    found = [c for c in circles(edges) if frozenset(c) not in ALLOWED_CIRCLES]
    assert not found, "import circles, imports inside functions included:\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_no_private_reaches_into_other_packages() -> None:
    found = [r for r in reaches(sources()) if enforced(r.module) and (r.module, r.name) not in ALLOWED]
    assert not found, "reaches into another package's privates:\n" + "\n".join(map(str, found))


def test_the_allowed_list_is_short_and_still_needed() -> None:
    assert len(ALLOWED) + len(ALLOWED_CIRCLES) + len(ALLOWED_CALLS_UP) <= 10
    modules = sources()
    live = {(r.module, r.name) for r in reaches(modules)}
    assert set(ALLOWED) <= live, f"allowed but no longer used: {sorted(set(ALLOWED) - live)}"
    standing = {frozenset(c) for c in circles([e for e in import_graph(modules) if not e.lazy])}
    assert set(ALLOWED_CIRCLES) <= standing, f"allowed circles now gone: {set(ALLOWED_CIRCLES) - standing}"
    calls = {(e.source, e.target) for e in import_graph(modules) if e.lazy}
    assert set(ALLOWED_CALLS_UP) <= calls, f"allowed calls up now gone: {set(ALLOWED_CALLS_UP) - calls}"


def test_the_scan_sees_each_kind_of_violation(tmp_path: Path) -> None:
    """The rules catch what they say they catch (a circle through a TYPE_CHECKING import, a private module
    import, a private attribute of another package), and let a function-level import be."""
    trees = {
        "orchestra.a.m": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from orchestra.b.n import X\n",
        "orchestra.b.n": "from orchestra.a.m import Y\nfrom orchestra.a._p import Z\n"
        "def f(o):\n    from orchestra.c import W\n    return o._secret\n",
        "orchestra.a._p": "class Z:\n    def __init__(self):\n        self._secret = 1\n",
        "orchestra.c": "from orchestra.b.n import X\n",
    }
    modules = {name: (tmp_path / "x.py", ast.parse(code)) for name, code in trees.items()}
    assert circles([e for e in import_graph(modules) if not e.lazy]) == [["orchestra.a.m", "orchestra.b.n"]]
    found = {(r.module, r.name) for r in reaches(modules)}
    assert found == {("orchestra.b.n", "orchestra.a._p"), ("orchestra.b.n", "_secret")}


def report() -> str:
    modules = sources()
    edges = import_graph(modules)
    lines = ["circles, module level:"]
    lines += [f"  {' <-> '.join(c)}" for c in circles([e for e in edges if not e.lazy])] or ["  none"]
    lines.append("circles, counting imports inside functions too:")
    lines += [f"  {' <-> '.join(c)}" for c in circles(edges)] or ["  none"]
    by_package: dict[str, list[Reach]] = defaultdict(list)
    for reach in reaches(modules):
        by_package[package_of(reach.module)].append(reach)
    total = sum(map(len, by_package.values()))
    lines.append(f"private reaches: {total}")
    for package in sorted(by_package):
        mark = "enforced" if ENFORCED is ALL or package in ENFORCED else "reported"
        lines.append(f"  {package or ROOT} ({len(by_package[package])}, {mark}):")
        lines += [f"    {reach}" for reach in by_package[package]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
