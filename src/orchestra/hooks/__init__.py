"""Hooks: typed events, a registry, and the ``HookProvider`` protocol plugins implement."""

from orchestra.hooks._registry import (
    HookCallback,
    HookEvent,
    HookProvider,
    HookRegistry,
    OrchestratorSessionManager,
    SessionManager,
)
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
