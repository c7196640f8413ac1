"""Hooks: typed events, a registry, and the ``HookProvider`` protocol plugins implement."""

from orchestra.hooks.events import (
    AfterInvocation,
    AfterModelCall,
    AfterToolCall,
    AgentInitialized,
    BeforeInvocation,
    BeforeModelCall,
    BeforeToolCall,
    MessageAdded,
    MessageRedacted,
    TurnCheckpoint,
)
from orchestra.hooks.registry import (
    HookCallback,
    HookEvent,
    HookProvider,
    HookRegistry,
    OrchestratorSessionManager,
    SessionManager,
)

__all__ = [
    "AfterInvocation",
    "AfterModelCall",
    "AfterToolCall",
    "AgentInitialized",
    "BeforeInvocation",
    "BeforeModelCall",
    "BeforeToolCall",
    "HookCallback",
    "HookEvent",
    "HookProvider",
    "HookRegistry",
    "MessageAdded",
    "MessageRedacted",
    "OrchestratorSessionManager",
    "SessionManager",
    "TurnCheckpoint",
]
