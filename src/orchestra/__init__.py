"""orchestra: multi-agent pipelines (graphs and swarms of agents) that never lose their progress."""

import typing

from orchestra.agent import Agent, AgentResult
from orchestra.interrupts import Interrupt
from orchestra.messages import Message
from orchestra.models import FunctionModel, ScriptedModel, ToolCall
from orchestra.tools import ToolContext, tool
from orchestra.waits import EventResult, sleep, wait_for_event

if typing.TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports it
    from orchestra.spec import load

__all__ = [
    "Agent",
    "AgentResult",
    "EventResult",
    "FunctionModel",
    "Interrupt",
    "Message",
    "ScriptedModel",
    "ToolCall",
    "ToolContext",
    "load",
    "sleep",
    "tool",
    "wait_for_event",
]

__version__ = "0.1.0"  # the distribution's version too (pyproject.toml reads it from here)


def __getattr__(name: str) -> object:
    # ``load`` brings the YAML spec models (pydantic) with it: imported when first used, not by every
    # ``import orchestra`` (an agent in Python never needs them).
    if name == "load":
        from orchestra.spec import load

        return load
    raise AttributeError(f"module 'orchestra' has no attribute {name!r}")
