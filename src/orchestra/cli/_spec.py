"""``orchestra validate``, ``graph`` and ``schema``: read a spec (or print its schema), run nothing."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from orchestra.cli._options import SpecFile, load_spec
from orchestra.cli._output import fail, out
from orchestra.cli._render import diagram
from orchestra.multiagent import MultiAgentBase
from orchestra.spec import build, json_schema

__all__ = ["app"]

app = typer.Typer()


@app.command()
def validate(
    file: SpecFile,
) -> None:
    """Check a spec and print every problem as file:line:column: field: message (exit 1 if any).

    Example: [bold]orchestra validate examples/graphs/fan_out.yaml[/]
    """
    loaded = load_spec(file)
    out.print(f"{file}: valid {loaded.spec.kind} {loaded.spec.id!r}", highlight=False)


@app.command()
def graph(
    file: SpecFile,
    fmt: Annotated[str, typer.Option("--format", "-f", help="mermaid, dot or text.")] = "text",
) -> None:
    """Draw a pipeline as a mermaid flowchart, a Graphviz dot graph, or text.

    Example: [bold]orchestra graph examples/graphs/review_loop.yaml --format mermaid[/]
    """
    if fmt not in ("mermaid", "dot", "text"):
        raise typer.BadParameter("use mermaid, dot or text", param_hint="--format")
    loaded = load_spec(file)
    target = build(loaded)
    if not isinstance(target, MultiAgentBase):
        raise fail(f"{file} is a single agent: there is no graph to draw")
    out.print(diagram(target, fmt), end="", markup=False, highlight=False)


@app.command()
def schema() -> None:
    """Print the JSON Schema of pipeline specs (version 1).

    Example: [bold]orchestra schema > pipeline.schema.json[/]
    """
    out.print_json(json.dumps(json_schema()))
