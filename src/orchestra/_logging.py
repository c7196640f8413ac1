"""Logging: structlog loggers that write through the standard library's ``logging``.

orchestra never configures output itself: the ``orchestra`` logger has a ``NullHandler``, so nothing is
printed unless the application configures logging (the ``orchestra`` command does, see ``--log-format``).
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["get_logger"]

logging.getLogger("orchestra").addHandler(logging.NullHandler())

_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,  # first: a line whose level is off costs one check
    structlog.contextvars.merge_contextvars,  # the run, session and node ids bound by orchestrators
    structlog.stdlib.render_to_log_kwargs,
]


def get_logger(name: str, **bound: Any) -> Any:
    """A structlog logger over ``logging.getLogger(name)`` with ``bound`` key-values."""
    logger = structlog.wrap_logger(
        logging.getLogger(name), processors=_PROCESSORS, wrapper_class=structlog.stdlib.BoundLogger
    )
    return logger.bind(**bound) if bound else logger
