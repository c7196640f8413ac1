"""The layers around hosting, read from the source (every import, at module level or inside a function):
sessions are used through their public face, hosting sits below the server with no circle of its own and
no HTTP framework, and the server holds only HTTP."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "orchestra"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(under: str = "") -> dict[str, Path]:
    root = PACKAGE / under if under else PACKAGE
    found = {module_name(path): path for path in sorted(root.rglob("*.py"))}
    assert found, f"no modules under {root}"
    return found


def imports(path: Path) -> Iterator[tuple[str, int]]:
    """Every module ``path`` imports (``from a import b`` counts as ``a`` and as ``a.b``), with its line."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, node.lineno
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def reaches(under: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for name, path in modules(under).items():
        for imported, line in imports(path):
            if any(imported == f or imported.startswith(f + ".") for f in forbidden):
                found.append(f"{name}:{line} imports {imported}")
    return sorted(set(found))


def test_session_internals_stay_inside_session():
    """What hosting, the server, the CLI and Temporal need of a session is its public face
    (``orchestra.session``, ``orchestra.session.scopes``), never its journal or layout modules."""
    private = ("orchestra.session._journal", "orchestra.session._layout")
    outside = [
        line
        for line in reaches("", private)
        if not line.startswith(("orchestra.session.", "orchestra.session:"))
    ]
    assert outside == []


HTTP = ("fastapi", "starlette", "sse_starlette", "uvicorn")


def test_hosting_has_no_http_and_sits_below_the_server():
    """Nothing in hosting imports an HTTP framework or the server that calls it."""
    assert reaches("hosting", (*HTTP, "orchestra.server", "orchestra.cli")) == []


def test_nothing_below_the_server_imports_http():
    """FastAPI and Starlette are the server's alone (the CLI starts uvicorn on the server's app)."""
    outside = [
        line
        for line in reaches("", HTTP)
        if not line.startswith(("orchestra.server.", "orchestra.server:", "orchestra.cli."))
    ]
    assert outside == []


def graph(under: str) -> dict[str, set[str]]:
    """Each module under ``under`` and the modules under it that it imports (a package counts as its
    ``__init__``; its re-exports are not an edge back into it)."""
    found = modules(under)
    edges: dict[str, set[str]] = {}
    for name, path in found.items():
        edges[name] = {
            imported
            for imported, _ in imports(path)
            if imported in found and imported != name and path.name != "__init__.py"
        }
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import circle, as the modules around it, or [] (a depth-first search)."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_hosting_has_no_import_circle():
    """A request goes down once: no module of hosting imports one that imports it back, at module
    level or inside a function."""
    assert cycle(graph("hosting")) == []


def test_cycle_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []


def test_the_server_holds_only_http():
    """The server maps requests to hosting calls: it reaches no storage, session, agent or pipeline
    code of its own (runs are coordinated in hosting), only hosting, errors, and small helpers."""
    allowed = (
        "orchestra.server",
        "orchestra.hosting",
        "orchestra.errors",
        "orchestra.tracing",
        "orchestra._json",
        "orchestra._ids",
        "orchestra._logging",
        "orchestra.session.uuid7",
    )
    reached = []
    for name, path in modules("server").items():
        for imported, line in imports(path):
            if imported in ("orchestra", "orchestra.session"):  # ``from orchestra.session import uuid7``
                continue
            if imported.startswith("orchestra.") and not any(
                imported == a or imported.startswith(a + ".") for a in allowed
            ):
                reached.append(f"{name}:{line} imports {imported}")
    assert sorted(set(reached)) == []
