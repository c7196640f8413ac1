"""The protocol front doors of ``orchestra serve``: MCP, A2A and AG-UI, each a translation of the same
runtime events (``RunService.stream``), never a second runtime.

| door | where | needs |
| --- | --- | --- |
| MCP server (streamable HTTP) | ``/mcp``: each hosted agent and pipeline is a tool | ``mcp`` (the ``[mcp]`` extra) |
| A2A | ``/a2a/{agent}/`` (JSON-RPC, ``message/send`` and ``message/stream`` too), its card at ``/a2a/{agent}/.well-known/agent-card.json`` | ``a2a-sdk`` (``[a2a]``) |
| AG-UI | ``POST /ag-ui/{agent}``: a run's events as AG-UI events (server-sent) | ``ag-ui-protocol`` (``[agui]``) |

Every door takes the API's callers (``Authorization: Bearer <key or JWT>``, ``door_caller``) and shows
a caller only the agents it may call; the run service holds ownership (another user's session is unknown). A door whose package is not installed is simply not mounted, and nothing of it is imported.
"""

from __future__ import annotations

import importlib.util
import typing

if typing.TYPE_CHECKING:
    from fastapi import FastAPI

    from orchestra.hosting import RunService
    from orchestra.hosting.config import ServerConfig
    from orchestra.server.auth import Authenticator

__all__ = ["available", "mount_protocols"]


def available() -> dict[str, bool]:
    """Which doors can be mounted here (their packages are installed; nothing is imported to know)."""
    return {"mcp": _installed("mcp"), "a2a": _installed("a2a"), "ag-ui": _installed("ag_ui")}


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a package blocked in sys.modules, or a broken one
        return False


def mount_protocols(app: FastAPI, runtime: RunService, auth: Authenticator, config: ServerConfig) -> None:
    """Mount every door whose package is installed (see the module docstring)."""
    doors = available()
    if doors["mcp"]:
        from orchestra.server.protocols.mcp_server import mount_mcp

        mount_mcp(app, runtime, auth, config)
    if doors["a2a"]:
        from orchestra.server.protocols.a2a import mount_a2a

        mount_a2a(app, runtime, auth, config)
    if doors["ag-ui"]:
        from orchestra.server.protocols.agui import mount_agui

        mount_agui(app, runtime, auth, config)
