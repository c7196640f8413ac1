"""What the parts below ``MultiAgentBase`` know of a Graph or Swarm: the ``Orchestrator`` protocol.

Nodes run a nested orchestrator, a map keeps its items in the run document, the meter charges a run,
and hook events carry the orchestrator to session managers; each of them is imported by
``MultiAgentBase``, so none may import it back. They name this protocol instead, and
``MultiAgentBase`` is its one implementation (``tests/multiagent/test_orchestrator_protocol.py``). The
protocol's private members are the run document's own primitives: they are shared within this package
only.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import anyio

from orchestra.agent.state import JSONState
from orchestra.budget import Budget
from orchestra.multiagent.results import MultiAgentResult, NodeResult

__all__ = ["Orchestrator", "RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """How the current invocation treats a saved run (passed on to nested orchestrators)."""

    force_resume: bool = False
    resume_unfinished: bool = False
    fresh: bool = False  # start the task anew even if the last run did not finish (it is left as saved)


@runtime_checkable
class Orchestrator(Protocol):
    """A Graph or Swarm as nodes, maps, meters and hooks use it."""

    id: str
    kind: str
    scope_id: str
    session_manager: Any
    state: JSONState
    budget: Budget | None
    _fields: dict[str, Any]
    _dirty: set[str]
    _unset: set[str]
    _run_options: RunOptions
    _sync_nodes: anyio.Lock

    @property
    def nodes(self) -> Mapping[str, Any]:
        """Its Node objects (``nodes.py`` sits above this module, so they are not typed here)."""
        ...

    @property
    def run(self) -> dict[str, Any]: ...

    # -- the run document ---------------------------------------------------------------------------------

    def _set(self, name: str, value: Any) -> None: ...

    def _node_record(self, node_id: str) -> dict[str, Any]: ...

    def _update_run(self, **changes: Any) -> None: ...

    def _update_node(self, node_id: str, **changes: Any) -> None: ...

    def _mark_agent(self, node_id: str) -> None: ...

    def _elapsed_ms(self) -> float: ...

    def node_result(self, node_id: str) -> NodeResult | None: ...

    def output_source(self) -> dict[str, Any] | None: ...

    def restore_output(self, output: Any, source: dict[str, Any] | None) -> Any: ...

    def take_changes(
        self, *, include_agents: bool = True
    ) -> tuple[dict[str, Any], dict[str, list[Any]], list[str]]: ...

    def load_document(
        self, fields: Mapping[str, Any], logs: Mapping[str, list[Any]], *, shared_records: bool = False
    ) -> None: ...

    def serialize_state(self) -> dict[str, Any]: ...

    def deserialize_state(self, payload: Mapping[str, Any]) -> None: ...

    async def _save_progress(self, node_id: str, result: NodeResult | None = None) -> None: ...

    # -- running it as a node -----------------------------------------------------------------------------

    def _open_interrupt_ids(self) -> set[str]: ...

    async def invoke_async(
        self,
        task: Any = None,
        *,
        invocation_state: dict[str, Any] | None = None,
        force_resume: bool = False,
        resume_unfinished: bool = False,
    ) -> MultiAgentResult: ...

    def stream_async(
        self,
        task: Any = None,
        *,
        invocation_state: dict[str, Any] | None = None,
        force_resume: bool = False,
        resume_unfinished: bool = False,
    ) -> AsyncGenerator[Any, None]: ...
