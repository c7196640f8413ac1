"""A spec's ``memory:`` section: its checks (with positions) and the store, tools and hook it builds.

``tools: [memory]`` in an agent gives it ``memory_tools(store, namespace=memory.namespace)``, and a Graph
or Swarm gets ``memory=store`` (function nodes read ``node_input.memory``). Served, the caller's binding
wins: the workspace's store, under the caller's namespace. ``memory.context`` adds a ``MemoryContext`` to
every agent.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from orchestra.errors import ConfigurationError
from orchestra.memory.binding import checked_namespace, load_embedder
from orchestra.spec.models import PipelineSpec
from orchestra.storage import check_storage_uri, storage_from_uri

__all__ = ["MEMORY_TOOL", "building_with", "check_memory", "memory_hooks", "memory_store", "memory_tools_of"]

MEMORY_TOOL = "memory"

# The store and namespace the agents of the spec being built use (set by ``building_with``).
_building: contextvars.ContextVar[tuple[Any, PipelineSpec] | None] = contextvars.ContextVar(
    "orchestra_spec_memory", default=None
)


def _storage_uri(spec: PipelineSpec) -> str:
    assert spec.memory is not None
    if spec.memory.storage is not None:
        return spec.memory.storage
    return spec.session.storage if spec.session is not None else "file:./.orchestra"


def check_memory(spec: PipelineSpec, problem: Callable[[tuple[str | int, ...], str], None]) -> None:
    """The section's problems, and an agent's ``memory`` tools without a section, each at its field."""
    if spec.memory is None:
        for index, agent in enumerate(spec.agents):
            for position, tool in enumerate(agent.tools):
                if tool == MEMORY_TOOL:
                    problem(
                        ("agents", index, "tools", position),
                        "the memory tools need a memory: section (memory: {namespace: [...]})",
                    )
        return
    try:
        checked_namespace(spec.memory.namespace)
    except ConfigurationError as exc:
        problem(("memory", "namespace"), str(exc))
    if spec.memory.storage is not None:
        try:
            check_storage_uri(spec.memory.storage)
        except ConfigurationError as exc:
            problem(("memory", "storage"), str(exc))
    if spec.memory.embedder is not None:
        try:
            load_embedder(spec.memory.embedder)
        except ConfigurationError as exc:
            problem(("memory", "embedder"), str(exc))
        except Exception as exc:  # importing user code may raise anything
            problem(
                ("memory", "embedder"),
                f"importing {spec.memory.embedder!r} raised {type(exc).__name__}: {exc}",
            )


def memory_store(spec: PipelineSpec) -> Any:
    """The store the section describes, or None without one."""
    if spec.memory is None:
        return None
    from orchestra.memory import MemoryStore

    memory = spec.memory
    embedder = load_embedder(memory.embedder) if memory.embedder is not None else None
    return MemoryStore(
        storage_from_uri(_storage_uri(spec)), embedder=embedder, embed_fields=tuple(memory.embed_fields)
    )


@contextmanager
def building_with(store: Any, spec: PipelineSpec) -> Iterator[None]:
    """While a spec is built, its agents' memory tools and hooks come from ``store`` and ``spec.memory``."""
    token = _building.set((store, spec) if spec.memory is not None else None)
    try:
        yield
    finally:
        _building.reset(token)


def memory_tools_of() -> Any:
    """The ``memory`` tools of an agent being built."""
    from orchestra.memory.tools import memory_tools

    found = _building.get()
    if found is None:
        raise ConfigurationError("the memory tools need a memory: section (memory: {namespace: [...]})")
    store, spec = found
    assert spec.memory is not None
    return memory_tools(store, namespace=spec.memory.namespace)


def memory_hooks() -> list[Any]:
    """The ``MemoryContext`` of an agent being built, if the section asks for one."""
    found = _building.get()
    if found is None or found[1].memory is None or found[1].memory.context is None:
        return []
    from orchestra.memory.context import MemoryContext

    store, spec = found
    assert spec.memory is not None
    assert spec.memory.context is not None
    context = spec.memory.context
    return [
        MemoryContext(
            store,
            namespace=spec.memory.namespace,
            limit=context.limit,
            max_tokens=context.max_tokens,
        )
    ]
