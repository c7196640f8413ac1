"""What the CLI draws: the live node table, pipeline diagrams (mermaid, dot, text)."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.table import Table

from orchestra.multiagent import Graph, MultiAgentBase, Swarm
from orchestra.multiagent.events import HandoffEvent, NodeStartEvent, NodeStopEvent
from orchestra.multiagent.results import output_text

__all__ = ["NodeTable", "diagram"]

STATUS_STYLE = {
    "pending": "dim",
    "running": "yellow",
    "completed": "green",
    "failed": "red",
    "interrupted": "magenta",
}


class NodeTable:
    """The live table of node status that ``orchestra run`` shows while a pipeline runs."""

    def __init__(self, orchestrator: MultiAgentBase) -> None:
        self.rows: dict[str, dict[str, Any]] = {
            node_id: {"status": "pending", "runs": 0, "started": None, "seconds": 0.0, "output": ""}
            for node_id in orchestrator.nodes
        }
        self.handoffs = 0
        self._orchestrator = orchestrator
        self._synced = False

    def _sync_with_saved_run(self) -> None:
        """On a resume, show what the saved run already did (loaded once the run started)."""
        self._synced = False
        for node_id, row in self.rows.items():
            record = self._orchestrator.document.node(node_id)
            if not record or record.get("result") is None:
                continue
            result = record["result"]
            row["status"] = record["status"] if record["status"] != "executing" else "interrupted"
            row["runs"] = record.get("executions", 0)
            row["seconds"] = (result.get("execution_time_ms") or 0.0) / 1000
            row["output"] = output_text(result.get("output")).replace("\n", " ")[:60]

    def update(self, event: Any) -> None:
        if not self._synced:
            self._sync_with_saved_run()
        if isinstance(event, NodeStartEvent):
            row = self.rows[event.node_id]
            row.update(status="running", started=time.perf_counter())
        elif isinstance(event, NodeStopEvent):
            row = self.rows[event.node_id]
            row["status"] = event.result.status.value
            row["runs"] = max(row["runs"] + 1, event.result.execution_count)
            row["seconds"] += event.result.execution_time_ms / 1000
            row["output"] = output_text(event.result.output).replace("\n", " ")[:60]
        elif isinstance(event, HandoffEvent):
            self.handoffs += 1

    def set_progress(self, progress: dict[str, Any], outputs: dict[str, Any] | None = None) -> None:
        """Update from a Temporal workflow's ``progress`` query (and the outputs saved so far)."""
        executions = progress.get("executions", {})
        seconds = progress.get("seconds", {})
        for node_id, status in progress["nodes"].items():
            row = self.rows.get(node_id)
            if row is None:
                continue
            status = "running" if status == "executing" else status
            if status == "running" and row["status"] != "running":
                row["started"] = time.perf_counter()
            row["status"] = status
            row["runs"] = executions.get(node_id, row["runs"])
            row["seconds"] = seconds.get(node_id, row["seconds"])
            if outputs and node_id in outputs:
                row["output"] = output_text(outputs[node_id]).replace("\n", " ")[:60]

    def render(self) -> Table:
        table = Table(title=None, expand=False)
        for column in ("node", "status", "runs", "seconds", "output"):
            table.add_column(column)
        for node_id, row in self.rows.items():
            seconds = row["seconds"]
            if row["status"] == "running" and row["started"] is not None:
                seconds += time.perf_counter() - row["started"]
            style = STATUS_STYLE.get(row["status"], "")
            table.add_row(
                node_id, f"[{style}]{row['status']}[/]", str(row["runs"]), f"{seconds:.2f}", row["output"]
            )
        return table


def _label(condition: Any) -> str:
    spec = getattr(condition, "spec", None)
    if spec is not None:
        return json.dumps(spec.model_dump(by_alias=True, exclude_none=True), separators=(",", ":"))
    return getattr(condition, "__name__", "condition")


def diagram(orchestrator: MultiAgentBase, fmt: str) -> str:
    """The pipeline as a mermaid flowchart, a Graphviz dot graph, or plain text."""
    edges: list[tuple[str, str, str]] = []
    if isinstance(orchestrator, Graph):
        edges = [(e.src, e.dst, _label(e.condition) if e.condition else "") for e in orchestrator.edges]
        entries = orchestrator.entry_points
    else:
        assert isinstance(orchestrator, Swarm)
        names = list(orchestrator.nodes)
        edges = [(a, b, "handoff") for a in names for b in names if a != b]
        entries = [orchestrator.entry_point]
    kinds = {node_id: node.kind for node_id, node in orchestrator.nodes.items()}
    if fmt == "mermaid":
        lines = ["flowchart TD"]
        for node_id, kind in kinds.items():
            shape = f'{node_id}["{node_id}"]' if kind == "agent" else f'{node_id}[["{node_id} ({kind})"]]'
            lines.append(f"    {shape}")
        for src, dst, label in edges:
            arrow = f" -->|{label.replace('|', '/').replace(chr(34), chr(39))}| " if label else " --> "
            lines.append(f"    {src}{arrow}{dst}")
        return "\n".join(lines) + "\n"
    if fmt == "dot":
        lines = [f'digraph "{orchestrator.id}" {{', "    rankdir=TB;"]
        for node_id, kind in kinds.items():
            shape = "box" if kind == "agent" else "component" if kind == "orchestrator" else "ellipse"
            peripheries = 2 if node_id in entries else 1
            lines.append(f'    "{node_id}" [shape={shape}, peripheries={peripheries}];')
        for src, dst, label in edges:
            attr = f' [label="{label.replace(chr(34), chr(39))}"]' if label else ""
            lines.append(f'    "{src}" -> "{dst}"{attr};')
        lines.append("}")
        return "\n".join(lines) + "\n"
    lines = [f"{orchestrator.kind} {orchestrator.id}: {len(kinds)} nodes, entry: {', '.join(entries)}"]
    for node_id, kind in kinds.items():
        outgoing = [
            f"{dst}" + (f" when {label}" if label else "") for src, dst, label in edges if src == node_id
        ]
        lines.append(f"  {node_id} ({kind})" + (f" -> {'; '.join(outgoing)}" if outgoing else ""))
    return "\n".join(lines) + "\n"
