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
