"""Tools written as modern code is: postponed annotations, names imported for type checking only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from orchestra import tool

if TYPE_CHECKING:
    from orchestra import ToolContext
    from orchestra.messages import Usage


@tool(context=True)
def whoami(greeting: str, tool_context: ToolContext) -> str:
    """Greets with the agent's name.

    Args:
        greeting: how to greet
    """
    return f"{greeting}, {tool_context.agent.name}"


def make_local_tool():
    class Point(BaseModel):
        x: int
        y: int

    @tool
    def norm(point: Point) -> int:
        """Manhattan norm of a point."""
        return abs(point.x) + abs(point.y)

    return norm


def make_unresolvable_tool():
    @tool
    def broken(usage: Usage) -> str:
        """Takes a type that exists only for the type checker."""
        return str(usage)

    return broken
