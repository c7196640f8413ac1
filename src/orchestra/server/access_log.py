"""The access log: one line per HTTP request, through structlog (logger ``orchestra.access``).

A line holds the method, the route's template (``/api/v1/runs/{run_id}``, never the path with its ids
filled in nor the query), the status, the duration, the request id (``X-Request-Id``) and the run id
when the request named or started one. It never holds a body, a header, a key or a token. ``orchestra
serve`` writes it to stderr (JSON under ``--log-format json``); ``--access-log off`` turns it off.
"""

from __future__ import annotations

import logging
import sys
import time
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestra._logging import get_logger

__all__ = ["ACCESS_LOG_ENV_VAR", "AccessLog", "configure_access_log", "note_run"]

ACCESS_LOG_ENV_VAR = "ORCHESTRA_ACCESS_LOG"  # console, json or off: set by ``orchestra serve``

log = get_logger("orchestra.access")

_RUN: ContextVar[dict[str, str] | None] = ContextVar("orchestra_access_run", default=None)

# Set by ``configure_access_log``: a structlog logger that renders and writes a line itself, without the
# standard library's record and handler (a console line cost 84 us through them, 18 us this way: a quarter
# of a bare app's request). Without it (an application that configures logging itself), lines go
# through ``logging.getLogger("orchestra.access")`` as before.
_direct: Any = None


def note_run(run_id: str) -> None:
    """Name the run this request is about in its access log line (a route calls it)."""
    holder = _RUN.get()
    if holder is not None:
        holder["run_id"] = run_id


class AccessLog:
    """Log each HTTP request once its answer has been sent (or the request failed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.logger = logging.getLogger("orchestra.access")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct = _direct
        if scope["type"] != "http" or (direct is None and not self.logger.isEnabledFor(logging.INFO)):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        holder: dict[str, str] = {}
        token = _RUN.set(holder)

        async def tracked(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        finally:
            _RUN.reset(token)
            route = scope.get("route")
            run_id = holder.get("run_id") or (scope.get("path_params") or {}).get("run_id")
            (direct or log).info(
                "request",
                method=scope["method"],
                route=getattr(route, "path", None) or "(no route)",
                status=status or 500,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
                **({"run_id": run_id} if run_id else {}),
            )


def configure_access_log(mode: str) -> None:
    """Write the access log to stderr as ``console`` or ``json`` lines, or not at all (``off``). Called
    in each server process (``create_app_from_env``): a worker process does not inherit the command's
    logging setup."""
    global _direct
    logger = logging.getLogger("orchestra.access")
    logger.setLevel(logging.WARNING)  # the lines go to ``_direct`` (or nowhere), never through here
    logger.propagate = False  # the command's own handler (on ``orchestra``) would write them twice
    if mode == "off":
        _direct = None
        return
    import structlog

    renderer: Any = (
        structlog.processors.JSONRenderer() if mode == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    _direct = structlog.wrap_logger(
        structlog.WriteLogger(sys.stderr),
        processors=[
            structlog.contextvars.merge_contextvars,  # the request id (bound by the app's middleware)
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
    )
