"""Who a request acts for, and what of a workspace it may see: the caller's ``Identity`` and the
ownership rules every hosted operation applies.

- An identity has a workspace, a user (the subject) and roles. The server's auth (``orchestra.server.auth``)
  makes one per request, from an API key, a JWT or a hook, and ``acting_as`` sets it for that request.
- What a caller creates (a session, a run, its events and interrupts) records ``owner``: its user.
- A caller that ``sees_workspace`` (an admin role, or a workspace-wide API key) sees and acts on everything
  in its workspace; any other caller only on what it owns. Another user's thing is answered as if it did
  not exist (404), never 403: an id's existence does not leak.
- A hosted agent with ``allow`` may be called only by the users and ``role:<name>`` entries it lists.
- No caller set (the server's own work: background runs, sweeps, takeovers) sees everything.

The caller is a context variable, so that every door (routes, streams, the dashboard, MCP, A2A, AG-UI)
reaches the run service's checks through the one call it already makes.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestra._imports import import_object
from orchestra.hosting.config import HostedSpec
from orchestra.spec.models import ID_PATTERN

__all__ = [
    "Identity",
    "acting_as",
    "caller",
    "identity_hook",
    "may_call",
    "memory_subject",
    "owner",
    "valid_workspace",
    "visible",
]


@dataclass(frozen=True)
class Identity:
    """A caller: its ``workspace``, its ``user`` (a JWT's subject, a key's name) and its ``roles``.

    ``sees_workspace``: it sees and acts on everything in its workspace (an admin role; a workspace-wide
    API key), not only what it owns. ``via`` says where it came from (``api_key``, ``jwt``, ``hook``).
    """

    workspace: str
    user: str
    roles: frozenset[str] = field(default_factory=frozenset)
    sees_workspace: bool = False
    via: str = "api_key"


_CALLER: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("orchestra_caller", default=None)


def acting_as(identity: Identity | None) -> contextvars.Token[Identity | None]:
    """Make ``identity`` the caller of what runs from here in this context (a request's task)."""
    return _CALLER.set(identity)


def caller() -> Identity | None:
    """The caller of the current request (None: the server's own work)."""
    return _CALLER.get()


def owner() -> str | None:
    """The owner to record on what the current caller creates (None: no caller)."""
    found = _CALLER.get()
    return None if found is None else found.user


def memory_subject() -> str | None:
    """Whose memory the current caller reads and writes (issue 36): its user where auth names one (a JWT,
    the hook, a key with roles); None, the workspace's memory, for a workspace-wide API key or no caller."""
    found = _CALLER.get()
    if found is None or (found.via == "api_key" and found.sees_workspace):
        return None
    return found.user


def visible(recorded_owner: str | None) -> bool:
    """Whether the current caller may see (and act on) something ``recorded_owner`` made.

    Something without an owner (made before ownership was recorded, or by the server itself) is the
    workspace's: only callers that see the whole workspace see it.
    """
    found = _CALLER.get()
    if found is None or found.sees_workspace:
        return True
    return recorded_owner is not None and recorded_owner == found.user


def may_call(hosted: HostedSpec, identity: Identity | None = None) -> bool:
    """Whether the caller (or ``identity``) may call ``hosted``: its workspace's, and named by its ``allow``
    list (a user, or ``role:<name>``) when it has one."""
    found = identity or _CALLER.get()
    if found is None:
        return True
    if found.workspace != hosted.workspace:
        return False
    if hosted.allow is None:
        return True
    return found.user in hosted.allow or any(f"role:{role}" in hosted.allow for role in found.roles)


def valid_workspace(value: object) -> bool:
    """Whether ``value`` can name a workspace (the config's id rule)."""
    return isinstance(value, str) and re.fullmatch(ID_PATTERN, value) is not None


def identity_hook(path: str) -> Callable[[Mapping[str, str]], Any]:
    """The ``auth.hook`` function named by ``module:function``.

    Raises:
        ConfigurationError: it cannot be imported.
    """
    hook: Callable[[Mapping[str, str]], Any] = import_object(path)
    return hook
