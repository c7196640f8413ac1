"""Import a Python object named by ``package.module:attribute``."""

from __future__ import annotations

import importlib
from typing import Any

from orchestra.errors import ConfigurationError

__all__ = ["import_object"]


def import_object(path: str) -> Any:
    """Import ``package.module:attribute`` (dots after the colon walk attributes).

    Raises:
        ConfigurationError: the path is malformed, the module cannot be imported, or it lacks the attribute.
    """
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"import path {path!r} must look like 'package.module:name'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        hint = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.partition(".")[0]:
            # The usual cause: a spec copied without the module of functions that sat beside it.
            hint = "; a pipeline's own module goes beside its spec file (that folder is searched first)"
        raise ConfigurationError(
            f"cannot import module {module_name!r} (from {path!r}): {exc}{hint}"
        ) from exc
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(f"module {module_name!r} has no attribute {attribute!r}") from None
    return obj
