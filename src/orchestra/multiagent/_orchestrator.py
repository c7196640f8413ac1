"""What the parts below ``MultiAgentBase`` know of a Graph or Swarm: the ``Orchestrator`` protocol.

Nodes run a nested orchestrator, a map resolves its list, the meter charges a run, hook events carry
the orchestrator to session managers, and sessions save its run document; ``MultiAgentBase`` imports
the modules that do so, so none of them may import it back. They name this protocol instead, and
``MultiAgentBase`` is its one implementation (``tests/multiagent/test_orchestrator_protocol.py``). Every
member is public.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import anyio

from orchestra.agent.state import JSONState
from orchestra.budget import Budget
from orchestra.multiagent._run_document import RunDocument
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
    """A Graph or Swarm as nodes, maps, meters, hooks and sessions use it."""

    id: str
    kind: str
    scope_id: str
    session_manager: Any
    state: JSONState
    budget: Budget | None
    run_options: RunOptions
    """The options of the current invocation (nested orchestrators run with them)."""
    resumed: bool
    """Whether the current (or last) invocation continued an unfinished run."""
    sync_nodes: anyio.Lock
    """Held while a sync function node runs: they run one at a time (see ``Node``)."""

    @property
    def nodes(self) -> Mapping[str, Any]:
        """Its Node objects (``nodes.py`` sits above this module, so they are not typed here)."""
        ...

    @property
    def document(self) -> RunDocument:
        """Its run document: the one way to read or change its run."""
        ...

    @property
    def run(self) -> dict[str, Any]: ...

    def elapsed_ms(self) -> float: ...

    async def save_progress(self, node_id: str, result: NodeResult | None = None) -> None: ...

    def output_source(self) -> dict[str, Any] | None: ...

    def restore_output(self, output: Any, source: dict[str, Any] | None) -> Any: ...

    def open_interrupt_ids(self) -> set[str]: ...

    def orchestrators(self) -> list[Orchestrator]: ...

    def serialize_state(self) -> dict[str, Any]: ...

    def deserialize_state(self, payload: Mapping[str, Any]) -> None: ...

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
