"""orchestra: multi-agent pipelines (graphs and swarms of agents) that never lose their progress."""

from orchestra.agent import Agent, AgentResult
from orchestra.interrupts import Interrupt
from orchestra.messages import Message
from orchestra.models import FunctionModel, ScriptedModel, ToolCall
from orchestra.spec import load
from orchestra.tools import ToolContext, tool

__all__ = [
    "Agent",
    "AgentResult",
    "FunctionModel",
    "Interrupt",
    "Message",
    "ScriptedModel",
    "ToolCall",
    "ToolContext",
    "load",
    "tool",
]

__version__ = "0.1.0"  # the distribution's version too (pyproject.toml reads it from here)
