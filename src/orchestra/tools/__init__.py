"""Tools: the ``@tool`` decorator, ``ToolContext``, and vended tools such as ``notebook``."""

from orchestra.tools._registry import ToolRegistry
from orchestra.tools._tool import (
    AgentTool,
    FunctionTool,
    ToolContext,
    ToolProgressEvent,
    ToolResultDict,
    TurnControl,
    tool,
    tool_result,
)
from orchestra.tools.delegate import DelegateTool
from orchestra.tools.notebook import notebook

__all__ = [
    "AgentTool",
    "DelegateTool",
    "FunctionTool",
    "ToolContext",
    "ToolProgressEvent",
    "ToolRegistry",
    "ToolResultDict",
    "TurnControl",
    "notebook",
    "tool",
    "tool_result",
]
