"""Safe YAML loading that remembers where every value came from (file, line, column).

PyYAML's ``SafeLoader`` composes the document into nodes (no Python objects are ever constructed from
tags); this module walks the nodes into plain data and records each value's position under its field
path, refuses duplicate keys, recursive aliases and alias bombs, and interpolates ``${ENV_VAR}``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["Located", "Position", "format_path", "load_located"]

MAX_NODES = 100_000
MAX_DEPTH = 64
_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap"}
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based


def format_path(path: Path) -> str:
    """``("edges", 2, "to")`` -> ``edges[2].to``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(document)"


@dataclass
class Located:
    """A loaded document: its data, the positions of its values, and the problems found while loading."""

    filename: str
    data: Any = None
    positions: dict[Path, Position] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def where(self, path: Path) -> Position:
        """The position of ``path``, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            position = self.positions.get(path[:end])
            if position is not None:
                return position
        return Position(1, 1)

    def error(self, path: Path, message: str) -> str:
        position = self.where(path)
        return f"{self.filename}:{position.line}:{position.column}: {format_path(path)}: {message}"


class _Walker:
    def __init__(self, located: Located) -> None:
        self.located = located
        self.constructor = yaml.SafeLoader("")
        self.count = 0
        self.active: set[int] = set()

    def walk(self, node: yaml.Node, path: Path) -> Any:
        if len(path) > MAX_DEPTH:
            raise _Stop(path, f"the document is nested more than {MAX_DEPTH} levels deep")
        self.count += 1
        if self.count > MAX_NODES:
            raise _Stop(path, f"the document is too large (more than {MAX_NODES} values once aliases expand)")
        self.located.positions[path] = Position(node.start_mark.line + 1, node.start_mark.column + 1)
        if id(node) in self.active:
            raise _Stop(path, "a YAML alias refers to itself (recursive document)")
        if isinstance(node, yaml.CollectionNode) and node.tag not in _PLAIN_TAGS:
            raise _Stop(path, f"unsupported YAML tag {node.tag!r}: specs hold plain data only")
        if isinstance(node, yaml.MappingNode):
            self.active.add(id(node))
            try:
                return self._mapping(node, path)
            finally:
                self.active.discard(id(node))
        if isinstance(node, yaml.SequenceNode):
            self.active.add(id(node))
            try:
                return [self.walk(item, (*path, index)) for index, item in enumerate(node.value)]
            finally:
                self.active.discard(id(node))
        value = self.constructor.construct_object(node, deep=True)
        return _interpolate(value, path, self.located)

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[Any, Any]:
        self.constructor.flatten_mapping(node)  # merge keys (<<)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.constructor.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool) and key is not None:
                position = Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                self.located.positions[(*path, "<key>")] = position
                raise _Stop((*path, "<key>"), f"mapping keys must be text, not {type(key).__name__}")
            key_path = (*path, str(key))
            if key in out:
                self.located.positions[key_path] = Position(
                    key_node.start_mark.line + 1, key_node.start_mark.column + 1
                )
                self.located.problems.append(self.located.error(key_path, f"duplicate key {key!r}"))
            out[key] = self.walk(value_node, key_path)
        return out


class _Stop(Exception):
    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def _interpolate(value: Any, path: Path, located: Located) -> Any:
    if not isinstance(value, str) or "${" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            located.problems.append(located.error(path, f"environment variable {name} is not set"))
            return ""
        return os.environ[name]

    return _ENV.sub(replace, value)


def load_located(text: str, filename: str) -> Located:
    """Parse ``text`` safely; syntax errors and structural problems land in ``located.problems``."""
    located = Located(filename)
    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        located.problems.append(f"{filename}:{line}:{column}: syntax: {problem}")
        return located
    except yaml.YAMLError as exc:  # reader errors (bad characters) carry a position of their own
        located.problems.append(f"{filename}:1:1: syntax: {exc}")
        return located
    except RecursionError:
        located.problems.append(f"{filename}:1:1: syntax: the document is nested too deeply")
        return located
    if len(documents) != 1 or documents[0] is None:
        count = "no document" if not documents or documents[0] is None else f"{len(documents)} documents"
        located.problems.append(f"{filename}:1:1: (document): expected one YAML document, found {count}")
        return located
    walker = _Walker(located)
    try:
        located.data = walker.walk(documents[0], ())
    except _Stop as stop:
        located.problems.append(located.error(stop.path, stop.message))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        located.problems.append(f"{filename}:{line}:{column}: syntax: {exc.problem}")
    return located
